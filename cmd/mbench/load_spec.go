package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"github.com/urfave/cli/v2"
)

// loadRun is one mbench load run: its spec (the load generator's config),
// what it is held to, and what the result records beside them in vLLM's
// terms.
type loadRun struct {
	cfg        openloop.Config
	policy     results.Policy
	pcts       []float64 // percentiles to report, sorted
	metrics    []string  // --percentile-metrics
	meta       map[string]string
	out        string
	now        time.Time
	backend    string // vLLM's name of the endpoint: openai (completions) or openai-chat
	dataset    string // vLLM's dataset name: random, prefix_repetition, sharegpt, custom; trace
	tokenizer  string
	rate       any // vLLM's request_rate: req/s, or "inf"
	ready      time.Duration
	simulated  bool // the endpoint said it is mbench sim
	label      string
	save       bool
	resultDir  string
	resultFn   string
	sweepRates int // --profile sweep: the rates between synchronous and throughput (0: one run)
	// rampFrom and rampTo are the ramp in vLLM's terms (req/s), when one
	// was asked for.
	rampFrom, rampTo float64
}

// The defaults vllm bench serve applies where a command line leaves a
// flag out (vllm/benchmarks/datasets/datasets.py and serve.py at
// 28be48fa944d; docs/loadgen.md cites the lines).
const (
	vllmNumPrompts       = 1000
	vllmRandomInputLen   = 1024
	vllmRandomOutputLen  = 128
	vllmEndpointPathComp = "/v1/completions"
	vllmEndpointPathChat = "/v1/chat/completions"
)

// loadSpec maps the flags into the load spec and validates it once, with
// the spec's own rules (openloop.Config.Validate); an error names the flag
// as the user typed it.
func loadSpec(c *cli.Context, typed typedFlags) (*loadRun, error) {
	if err := refuseUnsupported(c); err != nil {
		return nil, err
	}
	lr := &loadRun{now: time.Now(), label: c.String("label"), save: c.Bool("save-result"),
		resultDir: c.String("result-dir"), resultFn: c.String("result-filename"), tokenizer: c.String("tokenizer")}
	cfg := &lr.cfg
	cfg.Cell = "load"
	var err error
	if cfg.Targets, err = loadTargets(c, typed); err != nil {
		return nil, err
	}
	if cfg.Endpoint, lr.backend, err = loadEndpoint(c, typed); err != nil {
		return nil, err
	}
	if cfg.Model, err = modelFlag(c); err != nil {
		return nil, err
	}
	if cfg.Request, err = requestFromFlags(c); err != nil {
		return nil, err
	}
	if s := c.String("token-ids"); s != "" {
		if cfg.TokenIDs, err = openloop.ParseTokenRange(s); err != nil {
			return nil, usageError{fmt.Errorf("load: --token-ids: %w", err)}
		}
	}
	if cfg.Shape, lr.dataset, err = loadShape(c, typed); err != nil {
		return nil, err
	}
	cfg.Seed, cfg.Warmup = c.Int64("seed"), c.Int("warmup")
	cfg.Requests, cfg.Duration, cfg.MinCompleted = c.Int("requests"), c.Duration("duration"), c.Int("min-completed")
	if cfg.Shape.Trace == nil && !c.IsSet("requests") && !c.IsSet("duration") && !c.IsSet("min-completed") {
		cfg.Requests = vllmNumPrompts
	}
	cfg.Timeout, cfg.DrainTimeout, cfg.RequestTimeout = c.Duration("timeout"), c.Duration("drain-timeout"), c.Duration("request-timeout")
	cfg.RequestIDPrefix = c.String("request-id-prefix")
	if err := loadArrival(c, typed, lr); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, flagError(c, typed, err)
	}
	if err := loadRecordFlags(c, typed, lr); err != nil {
		return nil, err
	}
	if s := c.Int("ready-check-timeout-sec"); s < 0 {
		return nil, usageError{fmt.Errorf("load: --ready-check-timeout-sec %d: must be ≥ 0 seconds", s)}
	} else {
		lr.ready = time.Duration(s) * time.Second
	}
	switch f := c.String("format"); f {
	case "text", "json":
	default:
		return nil, usageError{fmt.Errorf("load: --format %q: valid: text, json", f)}
	}
	if err := loadProfile(c, lr); err != nil {
		return nil, err
	}
	// Without --out, a new directory per run under --result-dir (or the current directory).
	lr.out = cmp.Or(c.String("out"), filepath.Join(cmp.Or(lr.resultDir, "."), "mbench-load-"+lr.now.Format("20060102-150405")))
	return lr, nil
}

// loadTargets is --base-url (mbench's --url, repeatable), else
// http://--host:--port as vLLM builds it.
func loadTargets(c *cli.Context, typed typedFlags) ([]string, error) {
	urls := c.StringSlice("url")
	if len(urls) == 0 {
		return []string{"http://" + net.JoinHostPort(c.String("host"), strconv.Itoa(c.Int("port")))}, nil
	}
	flag := typed.as(&cli.StringSliceFlag{Name: "url", Aliases: []string{"base-url"}})
	if c.IsSet("host") || c.IsSet("port") {
		return nil, usageError{fmt.Errorf("load: --%s or --host/--port, not both", flag)}
	}
	for i, u := range urls {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return nil, usageError{fmt.Errorf("load: --%s: %q has no scheme: give http://HOST:PORT (or https://)", flag, redactURL("http://" + u)[len("http://"):])}
		}
		urls[i] = strings.TrimRight(u, "/")
	}
	return urls, nil
}

// loadEndpoint is the API driven, from --endpoint (a name or vLLM's path)
// and --backend (vLLM's name of the request function).
func loadEndpoint(c *cli.Context, typed typedFlags) (openloop.Endpoint, string, error) {
	var fromBackend openloop.Endpoint
	backend := c.String("backend")
	switch backend {
	case "":
	case "openai", "vllm":
		fromBackend = openloop.EndpointCompletions
	case "openai-chat":
		fromBackend = openloop.EndpointChat
	default:
		return "", "", usageError{fmt.Errorf("load: --%s %q is not supported: mbench load drives OpenAI completions (openai, vllm) and chat completions (openai-chat)", typed.as(&cli.StringFlag{Name: "backend", Aliases: []string{"endpoint-type"}}), backend)}
	}
	var e openloop.Endpoint
	switch ep := c.String("endpoint"); ep {
	case "":
		e = fromBackend
	case "completions", vllmEndpointPathComp:
		e = openloop.EndpointCompletions
	case "chat", vllmEndpointPathChat:
		e = openloop.EndpointChat
	default:
		return "", "", usageError{fmt.Errorf("load: --endpoint %q: valid: completions or %s, chat or %s", ep, vllmEndpointPathComp, vllmEndpointPathChat)}
	}
	e = cmp.Or(e, openloop.EndpointCompletions)
	if fromBackend != "" && e != fromBackend {
		return "", "", usageError{fmt.Errorf("load: --backend %s and --endpoint %s disagree: openai-chat drives %s, openai %s", backend, c.String("endpoint"), vllmEndpointPathChat, vllmEndpointPathComp)}
	}
	name := "openai"
	if e == openloop.EndpointChat {
		name = "openai-chat"
	}
	return e, cmp.Or(backend, name), nil
}

// loadShape is what each request asks for: vLLM's datasets random and
// prefix_repetition as token-id shapes, sharegpt and custom as dataset
// shapes, or mbench's --trace.
func loadShape(c *cli.Context, typed typedFlags) (openloop.Shape, string, error) {
	name := c.String("dataset-name")
	path := c.String("dataset")
	dsFlag := typed.as(&cli.StringFlag{Name: "dataset", Aliases: []string{"dataset-path"}})
	if p := c.String("trace"); p != "" {
		if name != "" || path != "" {
			return openloop.Shape{}, "", usageError{errors.New("load: --trace replays a trace's own prompts: leave out --dataset-name and --dataset-path")}
		}
		return openloop.Shape{Name: filepath.Base(p), Trace: &openloop.Trace{Path: p, TimeScale: c.Float64("time-scale"),
			RequestLimit: c.Int("request-limit"), MaxInflightSessions: c.Int("max-inflight-sessions")}}, "trace", nil
	}
	if c.IsSet("time-scale") || c.IsSet("request-limit") || c.IsSet("max-inflight-sessions") {
		return openloop.Shape{}, "", usageError{errors.New("load: --time-scale, --request-limit and --max-inflight-sessions apply to --trace")}
	}
	switch name {
	case "", "random", "prefix_repetition":
		if path != "" && name != "" {
			return openloop.Shape{}, "", usageError{fmt.Errorf("load: --dataset-name %s makes its prompts: leave out --%s, or give --dataset-name sharegpt or custom", name, dsFlag)}
		}
		if path != "" {
			return fileShape(c, path, "")
		}
		if name == "prefix_repetition" {
			return prefixRepetitionShape(c)
		}
		return randomShape(c)
	case "sharegpt", "custom":
		if path == "" {
			return openloop.Shape{}, "", usageError{fmt.Errorf("load: --dataset-name %s reads its prompts from a file: give --dataset-path FILE", name)}
		}
		return fileShape(c, path, name)
	}
	return openloop.Shape{}, "", usageError{fmt.Errorf("load: --dataset-name %s is not supported: use random, prefix_repetition, sharegpt or custom (a JSONL file of {\"prompt\": …}), or --trace for a Mooncake-format trace", name)}
}

// randomShape is vLLM's random dataset: token-id prompts of
// --random-input-len (after --random-prefix-len shared tokens) and
// --random-output-len, each drawn uniformly within ±--random-range-ratio.
func randomShape(c *cli.Context) (openloop.Shape, string, error) {
	in, out := vllmRandomInputLen, vllmRandomOutputLen
	if c.IsSet("input") {
		in = c.Int("input")
	}
	if c.IsSet("output") {
		out = c.Int("output")
	}
	rin, rout, err := rangeRatio(c.String("random-range-ratio"))
	if err != nil {
		return openloop.Shape{}, "", err
	}
	p := c.Int("random-prefix-len")
	if p < 0 {
		return openloop.Shape{}, "", usageError{fmt.Errorf("load: --random-prefix-len %d: must be ≥ 0 tokens", p)}
	}
	s := openloop.Shape{Name: fmt.Sprintf("%dx%d", p+in, out), Input: p + in, Output: out}
	if rin > 0 {
		s.InputDist = &openloop.Dist{Kind: "uniform", Min: p + int(math.Floor(float64(in)*(1-rin))), Max: p + int(math.Ceil(float64(in)*(1+rin)))}
	}
	if rout > 0 {
		s.OutputDist = &openloop.Dist{Kind: "uniform", Min: max(1, int(math.Floor(float64(out)*(1-rout)))), Max: max(1, int(math.Ceil(float64(out)*(1+rout))))}
	}
	if p > 0 {
		s.Prefix = &openloop.Prefix{NumPrefixes: 1, PrefixTokens: p}
	}
	return s, "random", nil
}

// rangeRatio reads --random-range-ratio: one ratio for both lengths, or
// vLLM's JSON {"input": r, "output": r}; each in [0, 1).
func rangeRatio(v string) (float64, float64, error) {
	bad := func() error {
		return usageError{fmt.Errorf("load: --random-range-ratio %q: want a ratio in [0, 1), or '{\"input\": 0.3, \"output\": 0.5}'", v)}
	}
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		var m map[string]float64
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return 0, 0, bad()
		}
		for k := range m {
			if k != "input" && k != "output" {
				return 0, 0, bad()
			}
		}
		if !(m["input"] >= 0 && m["input"] < 1 && m["output"] >= 0 && m["output"] < 1) {
			return 0, 0, bad()
		}
		return m["input"], m["output"], nil
	}
	if strings.TrimSpace(v) == "" {
		return 0, 0, nil
	}
	r, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(r >= 0 && r < 1) {
		return 0, 0, bad()
	}
	return r, r, nil
}

// prefixRepetitionShape is vLLM's prefix_repetition dataset: prompts of a
// shared prefix (one of --prefix-repetition-num-prefixes) and a random
// suffix.
func prefixRepetitionShape(c *cli.Context) (openloop.Shape, string, error) {
	p, sfx := c.Int("prefix-repetition-prefix-len"), c.Int("prefix-repetition-suffix-len")
	out := c.Int("prefix-repetition-output-len")
	if c.IsSet("output") {
		out = c.Int("output")
	}
	s := openloop.Shape{Name: fmt.Sprintf("prefix%dx%d", p, sfx), Input: p + sfx, Output: out,
		Prefix: &openloop.Prefix{NumPrefixes: c.Int("prefix-repetition-num-prefixes"), PrefixTokens: p}}
	return s, "prefix_repetition", nil
}

// fileShape is a dataset shape: --dataset-path in --dataset-format (else as
// vLLM's dataset name says, else by extension).
func fileShape(c *cli.Context, path, name string) (openloop.Shape, string, error) {
	if c.IsSet("input") {
		return openloop.Shape{}, "", usageError{errors.New("load: --input does not apply to a dataset file (the prompts come from the file)")}
	}
	format := c.String("dataset-format")
	if format == "" {
		switch {
		case name == "sharegpt":
			format = string(openloop.DatasetShareGPT)
		case name == "custom":
			format = string(openloop.DatasetJSONL)
		case filepath.Ext(path) == ".json":
			format = string(openloop.DatasetShareGPT)
		case filepath.Ext(path) == ".jsonl":
			format = string(openloop.DatasetJSONL)
		default:
			return openloop.Shape{}, "", usageError{fmt.Errorf("load: --dataset %s: give --dataset-format sharegpt or jsonl", path)}
		}
	}
	out := c.Int("output")
	switch {
	case c.IsSet("output"):
	case name == "sharegpt" && c.IsSet("sharegpt-output-len"):
		out = c.Int("sharegpt-output-len")
	case name == "custom":
		out = c.Int("custom-output-len")
	}
	if name == "" {
		name = map[string]string{string(openloop.DatasetShareGPT): "sharegpt", string(openloop.DatasetJSONL): "custom"}[format]
	}
	s := openloop.Shape{Name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)), Output: out,
		Dataset: &openloop.Dataset{Path: path, Format: openloop.DatasetFormat(format)}}
	return s, name, nil
}

// loadArrival sets when requests are sent: --request-rate (vLLM's default
// inf: all at once) with --burstiness, a closed loop (--concurrency), the
// --max-concurrency cap, and a ramp in mbench's terms (--ramp, --ramp-from,
// --ramp-duration) or vLLM's (--ramp-up-strategy from --ramp-up-start-rps
// to --ramp-up-end-rps over the whole run).
func loadArrival(c *cli.Context, typed typedFlags, lr *loadRun) error {
	cfg := &lr.cfg
	rateFlag := typed.as(&cli.Float64Flag{Name: "rate", Aliases: []string{"request-rate"}})
	rateSet, endSet := c.IsSet("rate"), c.IsSet("ramp-up-end-rps")
	if rateSet && endSet {
		return usageError{fmt.Errorf("load: --%s and --ramp-up-end-rps both give the rate the ramp reaches: give one", rateFlag)}
	}
	cfg.Rate = c.Float64("rate")
	if endSet {
		cfg.Rate = c.Float64("ramp-up-end-rps")
	}
	closed := c.IsSet("concurrency") // with a rate: the spec's rule (a closed loop has no rate)
	if !rateSet && !endSet && !closed && cfg.Shape.Trace == nil {
		if cfg.Duration > 0 || cfg.MinCompleted > 0 {
			return usageError{errors.New("load: give --rate R (req/s) or --concurrency N: --duration and --min-completed need a rate (vllm's default --request-rate inf sends --num-prompts requests at once)")}
		}
		cfg.Rate = math.Inf(1)
	}
	a := openloop.Arrival{Process: c.String("arrival"), Burstiness: c.Float64("burstiness"), MaxInFlight: c.Int("max-concurrency")}
	if c.IsSet("burstiness") {
		switch {
		case a.Process == "" && math.IsInf(a.Burstiness, 1): // vLLM: constant gaps
			a.Process = openloop.ArrivalConstant
		case a.Process == "" && a.Burstiness != 1:
			a.Process = openloop.ArrivalGamma
		case a.Process != "" && a.Process != openloop.ArrivalGamma && a.Burstiness != 1:
			return usageError{fmt.Errorf("load: --burstiness %g shapes gamma arrivals: leave out --arrival (or give --arrival gamma), not --arrival %s", a.Burstiness, a.Process)}
		}
	}
	a.Process = cmp.Or(a.Process, openloop.ArrivalPoisson)
	if a.Process == openloop.ArrivalConcurrency {
		return usageError{errors.New("load: --arrival concurrency: give --concurrency N")}
	}
	if closed {
		a.Process, a.InFlight = openloop.ArrivalConcurrency, c.Int("concurrency")
	}
	vllmRamp := typed["ramp-up-strategy"] || typed["ramp-up-start-rps"] || endSet
	if k := c.String("ramp"); k != "" {
		a.Ramp = &openloop.Ramp{Kind: openloop.RampKind(k), From: c.Float64("ramp-from"), Duration: c.Duration("ramp-duration")}
		if a.Ramp.Duration == 0 && vllmRamp {
			a.Ramp.Duration = rampOver(a.Ramp.Kind, a.Ramp.From, cfg.Rate, cfg.Requests)
		}
		lr.rampFrom, lr.rampTo = a.Ramp.From, cfg.Rate
		cfg.IncludeRamp = c.Bool("include-ramp") || vllmRamp
	} else if c.Bool("include-ramp") || c.IsSet("ramp-from") || c.IsSet("ramp-duration") {
		return usageError{errors.New("load: --ramp-from, --ramp-duration and --include-ramp need --ramp linear|exponential (vLLM: --ramp-up-strategy)")}
	}
	cfg.Arrival = a
	lr.rate = any(cfg.Rate)
	if math.IsInf(cfg.Rate, 1) || closed || (vllmRamp && a.Ramp != nil) { // vLLM's request_rate stays inf under its ramp
		lr.rate = "inf"
	}
	return nil
}

// rampOver is how long a ramp from r0 to r takes to send n requests, as
// vLLM ramps over the whole run: the expected arrivals of the ramp, ∫rate,
// equal n (linear: (r0+r)/2·d; exponential: (r−r0)/k with k = ln(r/r0)/d).
// 0 when there is no such ramp (the spec's validation then names it).
func rampOver(kind openloop.RampKind, r0, r float64, n int) time.Duration {
	if n <= 0 || !(r > 0) || math.IsInf(r, 0) || r0 < 0 {
		return 0
	}
	var d float64
	switch {
	case kind == openloop.RampExponential && r0 > 0 && r0 != r:
		d = float64(n) * math.Log(r/r0) / (r - r0)
	case kind == openloop.RampExponential && r0 == r:
		d = float64(n) / r
	case kind == openloop.RampLinear:
		d = 2 * float64(n) / (r0 + r)
	}
	if !(d > 0) || math.IsInf(d, 0) {
		return 0
	}
	return time.Duration(d * float64(time.Second))
}

// loadRecordFlags reads what the result records: percentiles and their
// metrics, the SLO, the share of failures a result allows, metadata.
func loadRecordFlags(c *cli.Context, typed typedFlags, lr *loadRun) error {
	var err error
	pf := typed.as(&cli.StringFlag{Name: "percentiles", Aliases: []string{"metric-percentiles"}})
	if lr.pcts, err = results.ParsePercentiles(c.String("percentiles")); err != nil {
		return usageError{fmt.Errorf("load: --%s: %w", pf, err)}
	}
	for _, m := range strings.Split(c.String("percentile-metrics"), ",") {
		m = strings.TrimSpace(m)
		if !slices.Contains([]string{"ttft", "tpot", "itl", "e2el"}, m) {
			return usageError{fmt.Errorf("load: --percentile-metrics: %q is not ttft, tpot, itl or e2el", m)}
		}
		lr.metrics = append(lr.metrics, m)
	}
	for _, kv := range c.StringSlice("metadata") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return usageError{fmt.Errorf("load: --metadata %q: want KEY=VALUE", kv)}
		}
		if lr.meta == nil {
			lr.meta = map[string]string{}
		}
		lr.meta[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	mf := c.Float64("max-failed")
	if !(mf >= 0 && mf <= 1) {
		return usageError{fmt.Errorf("load: --max-failed %v: must be a share between 0 and 1", mf)}
	}
	slo, err := parseSLOFlag(strings.Join(c.StringSlice("slo"), ","))
	if err != nil {
		return usageError{fmt.Errorf("load: %s", strings.Replace(err.Error(), "--slo", "--"+typed.as(&cli.StringSliceFlag{Name: "slo", Aliases: []string{"goodput"}}), 1))}
	}
	lr.policy = results.Policy{MinCompleted: lr.cfg.MinCompleted, Requests: lr.cfg.Requests, MaxErrorRate: mf, MaxErrorRateSet: true, SLO: slo}
	return nil
}

// arrivalName is the arrival as a summary names it.
func (lr *loadRun) arrivalName() string {
	switch {
	case lr.cfg.Shape.Trace != nil:
		return "trace"
	case math.IsInf(lr.cfg.Rate, 1):
		return "burst"
	}
	return lr.cfg.Arrival.Process
}

// engine is the summary's engine: the simulated one, or an external one.
func (lr *loadRun) engine() string {
	if lr.simulated {
		return "sim"
	}
	return "external"
}

// loadProfile reads --profile: unset, one run; sweep, GuideLLM's sweep,
// which chooses its own rates; vLLM's bare --profile (the engine's
// profiler) is not supported.
func loadProfile(c *cli.Context, lr *loadRun) error {
	switch p := c.String("profile"); p {
	case "":
		return nil
	case vllmProfile:
		return usageError{errors.New("load: --profile (vllm bench serve's) is not supported: start the engine's profiler yourself (POST /start_profile); mbench load's --profile sweep runs a sweep of rates")}
	case "sweep":
	default:
		return usageError{fmt.Errorf("load: --profile %q: valid: sweep (GuideLLM's synchronous is --concurrency 1, throughput --request-rate inf, poisson --request-rate R)", p)}
	}
	for _, f := range []string{"rate", "concurrency", "ramp", "ramp-up-end-rps", "duration", "min-completed"} {
		if c.IsSet(f) {
			return usageError{fmt.Errorf("load: --profile sweep chooses its own rates and runs --num-prompts requests at each: leave out --%s", f)}
		}
	}
	n := c.Int("sweep-rates")
	if n < 1 || n > 100 {
		return usageError{fmt.Errorf("load: --sweep-rates %d: must be in [1, 100]", n)}
	}
	if lr.save {
		return usageError{errors.New("load: --save-result writes one run's file; with --profile sweep every run's summary_A.json is in --out")}
	}
	lr.sweepRates = n
	return nil
}
