package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mbench/mbench/internal/durable"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/results/sweepdir"
)

// loadDoc is what a load run wrote: summary_A.json's bytes, the vLLM
// result's keys added to it, and the --save-result file's path.
type loadDoc struct {
	summary   []byte
	vllm      []kv // vLLM's keys with vLLM's meanings, in vLLM's order
	savedPath string
}

type kv struct {
	k string
	v any
}

// loadSpecRecord is everything needed to run the load again, in the
// flags' terms: summary_A.json's "load" key.
type loadSpecRecord struct {
	URLs           []string                   `json:"base_urls"` // without credentials
	Endpoint       string                     `json:"endpoint"`  // the path
	Backend        string                     `json:"backend"`
	Model          string                     `json:"model"`
	DatasetName    string                     `json:"dataset_name"`
	DatasetPath    string                     `json:"dataset_path,omitempty"`
	DatasetFormat  string                     `json:"dataset_format,omitempty"`
	InputLen       int                        `json:"input_len,omitempty"`  // the whole prompt, prefix included
	OutputLen      int                        `json:"output_len,omitempty"` // 0 with a dataset: the file's
	InputRange     *[2]int                    `json:"input_len_range,omitempty"`
	OutputRange    *[2]int                    `json:"output_len_range,omitempty"`
	PrefixLen      int                        `json:"prefix_len,omitempty"`
	NumPrefixes    int                        `json:"num_prefixes,omitempty"`
	Trace          *traceRecord               `json:"trace,omitempty"`
	Seed           int64                      `json:"seed"`
	NumPrompts     int                        `json:"num_prompts,omitempty"`
	Duration       string                     `json:"duration,omitempty"`
	MinCompleted   int                        `json:"min_completed,omitempty"`
	NumWarmups     int                        `json:"num_warmups"`
	RequestRate    any                        `json:"request_rate"`
	Arrival        string                     `json:"arrival"`
	Burstiness     float64                    `json:"burstiness,omitempty"`
	Concurrency    int                        `json:"concurrency,omitempty"`     // a closed loop's requests in flight
	MaxConcurrency int                        `json:"max_concurrency,omitempty"` // the cap on a rate
	Ramp           *rampRecord                `json:"ramp,omitempty"`
	IncludeRamp    bool                       `json:"include_ramp,omitempty"`
	IgnoreEOS      bool                       `json:"ignore_eos"`
	Sampling       openloop.Sampling          `json:"sampling"`
	ExtraBody      map[string]json.RawMessage `json:"extra_body,omitempty"`
	HeaderNames    []string                   `json:"header_names,omitempty"` // values never written
	TokenIDs       openloop.TokenRange        `json:"token_ids"`
	Timeout        string                     `json:"timeout"`
	DrainTimeout   string                     `json:"drain_timeout"`
	RequestTimeout string                     `json:"request_timeout,omitempty"`
}

type traceRecord struct {
	Path                string  `json:"path"`
	TimeScale           float64 `json:"time_scale"`
	RequestLimit        int     `json:"request_limit,omitempty"`
	MaxInflightSessions int     `json:"max_inflight_sessions,omitempty"`
}

type rampRecord struct {
	Kind     string  `json:"kind"`
	FromRPS  float64 `json:"from_rps"`
	ToRPS    float64 `json:"to_rps"`
	Duration string  `json:"duration"`
}

// writeLoadResult writes summary_A.json (the summary, then vLLM's keys it
// lacks, then "load": the spec to rerun it) and, with --save-result,
// vLLM's result file: the same document with --metadata's keys at top
// level, as vLLM writes them.
func writeLoadResult(lr *loadRun, sum *results.RunSummary, res *openloop.Result) (*loadDoc, error) {
	doc := &loadDoc{vllm: vllmKeys(lr, sum, res)}
	base, err := sweepdir.EncodeJSON(sum)
	if err != nil {
		return nil, fmt.Errorf("load: encode summary: %w", err)
	}
	var have map[string]json.RawMessage
	if err := json.Unmarshal(base, &have); err != nil {
		return nil, fmt.Errorf("load: encode summary: %w", err)
	}
	extra := slices.DeleteFunc(slices.Clone(doc.vllm), func(e kv) bool { _, ok := have[e.k]; return ok })
	extra = append(extra, kv{"load", lr.specRecord(res)})
	if doc.summary, err = appendKeys(base, extra); err != nil {
		return nil, err
	}
	if err := durable.WriteFile(filepath.Join(lr.out, "summary_A.json"), doc.summary, 0o644); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if !lr.save {
		return doc, nil
	}
	var meta []kv
	for _, k := range slices.Sorted(maps.Keys(lr.meta)) {
		if _, ok := have[k]; !ok {
			meta = append(meta, kv{k, lr.meta[k]})
		}
	}
	saved, err := appendKeys(doc.summary, meta)
	if err != nil {
		return nil, err
	}
	doc.savedPath = lr.resultPath(res.Model)
	if dir := filepath.Dir(doc.savedPath); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("load: --result-dir: %w", err)
		}
	}
	if err := durable.WriteFile(doc.savedPath, saved, 0o644); err != nil {
		return nil, fmt.Errorf("load: --save-result: %w", err)
	}
	return doc, nil
}

// vllmKeys are the keys of vllm bench serve's saved result
// (vllm/benchmarks/serve.py at 28be48fa944d: main_async's result_json,
// benchmark's result and process_one_metric), with vLLM's meanings.
func vllmKeys(lr *loadRun, sum *results.RunSummary, res *openloop.Result) []kv {
	var maxConc any
	if n := lr.concurrency(); n > 0 {
		maxConc = n
	}
	tokensPerS, concurrent := peakOutput(res)
	numPrompts, _ := results.NumPrompts.Value(sum)
	label := cmp.Or(lr.label, lr.backend)
	out := []kv{
		{"date", lr.now.Format("20060102-150405")},
		{"endpoint_type", lr.backend},
		{"backend", lr.backend},
		{"label", label},
		{"model_id", res.Model},
		// --tokenizer, else the model: mbench counts tokens from the
		// engine's usage, so the engine's own tokenizer.
		{"tokenizer_id", cmp.Or(lr.tokenizer, res.Model)},
		{results.NumPrompts.Key, int(numPrompts)},
		{"request_rate", lr.rate},
		{"burstiness", lr.burstiness()},
		{"max_concurrency", maxConc},
	}
	if lr.cfg.Arrival.Ramp != nil {
		out = append(out, kv{"ramp_up_strategy", string(lr.cfg.Arrival.Ramp.Kind)}, kv{"ramp_up_start_rps", lr.rampFrom}, kv{"ramp_up_end_rps", lr.rampTo})
	}
	for _, m := range []results.Metric{results.Duration, results.Completed, results.Failed, results.TotalInputTokens,
		results.TotalOutputTokens, results.RequestThroughput, results.Goodput, results.OutputThroughput} {
		var v any // null where the run has none (request_goodput without an SLO)
		if x, ok := m.Value(sum); ok {
			v = x
		}
		out = append(out, kv{m.Key, v})
	}
	out = append(out,
		kv{"total_token_throughput", totalTokenThroughput(sum)},
		kv{"max_output_tokens_per_s", tokensPerS},
		kv{"max_concurrent_requests", concurrent},
	)
	for _, m := range lr.metrics {
		l, _ := results.LatencyNamed(m)
		for _, stat := range []string{results.StatMean, results.StatMedian, results.StatStd} {
			out = append(out, kv{l.Key(stat), l.Stat(sum, stat)})
		}
		for _, p := range lr.pcts {
			out = append(out, kv{results.PercentileKey(p, m), l.Stat(sum, results.PercentileStat(p))})
		}
	}
	return out
}

// totalTokenThroughput is vLLM's (input + output tokens) / duration.
func totalTokenThroughput(sum *results.RunSummary) float64 {
	d, _ := results.Duration.Value(sum)
	in, _ := results.TotalInputTokens.Value(sum)
	out, _ := results.TotalOutputTokens.Value(sum)
	if !(d > 0) {
		return 0
	}
	return (in + out) / d
}

// peakOutput is vLLM's max_output_tokens_per_s and max_concurrent_requests
// over the measured requests that completed: content chunks per one-second
// bucket from the first send (a chunk at the first token, then one per
// inter-chunk gap), and the requests active in each bucket, both at their
// largest bucket.
func peakOutput(res *openloop.Result) (float64, int) {
	var ok []*openloop.Record
	var start, end int64 = math.MaxInt64, 0
	for i := range res.Records {
		r := &res.Records[i]
		if r.Phase != openloop.PhaseMeasure || !r.OK() || r.SentNs == 0 {
			continue
		}
		ok = append(ok, r)
		start, end = min(start, r.SentNs), max(end, r.DoneNs)
	}
	if len(ok) == 0 {
		return 0, 0
	}
	n := int(math.Ceil(float64(end-start)/1e9)) + 1
	tokens, active := make([]float64, n), make([]int, n)
	sec := func(ns int64) int { return int(float64(ns-start) / 1e9) }
	for _, r := range ok {
		if r.FirstTokenNs > 0 {
			t := float64(r.FirstTokenNs)
			if b := sec(r.FirstTokenNs); b < n {
				tokens[b]++
			}
			for _, gap := range r.ITLMs {
				t += gap * 1e6
				if b := sec(int64(t)); b >= 0 && b < n {
					tokens[b]++
				}
			}
		}
		for b := sec(r.SentNs); b <= sec(r.DoneNs) && b < n; b++ {
			active[b]++
		}
	}
	return slices.Max(tokens), slices.Max(active)
}

// burstiness is vLLM's burstiness: the gamma shape, 1 for Poisson, inf
// (as a string: JSON has no infinity) for constant gaps.
func (lr *loadRun) burstiness() any {
	switch lr.cfg.Arrival.Process {
	case openloop.ArrivalGamma:
		return lr.cfg.Arrival.Burstiness
	case openloop.ArrivalConstant:
		return "inf"
	}
	return 1.0
}

// concurrency is vLLM's max_concurrency: the cap on a rate, else a closed
// loop's requests in flight (0: neither).
func (lr *loadRun) concurrency() int {
	if a := lr.cfg.Arrival; a.Process == openloop.ArrivalConcurrency {
		return a.InFlight
	}
	return lr.cfg.Arrival.MaxInFlight
}

// resultPath is the --save-result file: --result-filename, else vLLM's
// name, LABEL-RATEqps[-concurrencyN]-MODEL-DATE.json (or its ramp form),
// under --result-dir.
func (lr *loadRun) resultPath(model string) string {
	name := lr.resultFn
	if name == "" {
		label := cmp.Or(lr.label, lr.backend)
		conc := ""
		if n := lr.concurrency(); n > 0 {
			conc = "-concurrency" + strconv.Itoa(n)
		}
		base := model[strings.LastIndex(model, "/")+1:]
		rate := fmt.Sprint(lr.rate)
		if r := lr.cfg.Arrival.Ramp; r != nil {
			name = fmt.Sprintf("%s-ramp-up-%s-%gqps-%gqps%s-%s-%s.json", label, r.Kind, lr.rampFrom, lr.rampTo, conc, base, lr.now.Format("20060102-150405"))
		} else {
			name = fmt.Sprintf("%s-%sqps%s-%s-%s.json", label, rate, conc, base, lr.now.Format("20060102-150405"))
		}
	}
	return filepath.Join(lr.resultDir, name)
}

// specRecord is the spec in the flags' terms.
func (lr *loadRun) specRecord(res *openloop.Result) loadSpecRecord {
	c := lr.cfg
	rec := loadSpecRecord{Endpoint: c.Endpoint.Path(), Backend: lr.backend, Model: res.Model, DatasetName: lr.dataset,
		Seed: c.Seed, NumPrompts: c.Requests, MinCompleted: c.MinCompleted, NumWarmups: c.Warmup,
		RequestRate: lr.rate, Arrival: lr.arrivalName(), Concurrency: c.Arrival.InFlight, MaxConcurrency: c.Arrival.MaxInFlight,
		IncludeRamp: c.IncludeRamp, IgnoreEOS: !c.Request.NaturalLength,
		Sampling: c.Request.Sampling, TokenIDs: res.TokenIDs, Timeout: c.Timeout.String(), DrainTimeout: c.DrainTimeout.String()}
	if c.Arrival.Process == openloop.ArrivalGamma {
		rec.Burstiness = c.Arrival.Burstiness
	}
	if r := c.Arrival.Ramp; r != nil {
		rec.Ramp = &rampRecord{Kind: string(r.Kind), FromRPS: r.From, ToRPS: c.Rate, Duration: r.Duration.String()}
	}
	sh := c.Shape
	rec.InputLen, rec.OutputLen = sh.Input, sh.Output
	if d := sh.InputDist; d != nil {
		rec.InputRange = &[2]int{d.Min, d.Max}
	}
	if d := sh.OutputDist; d != nil {
		rec.OutputRange = &[2]int{d.Min, d.Max}
	}
	if p := sh.Prefix; p != nil {
		rec.PrefixLen, rec.NumPrefixes = p.PrefixTokens, p.NumPrefixes
	}
	if d := sh.Dataset; d != nil {
		rec.DatasetPath, rec.DatasetFormat = d.Path, string(d.Format)
	}
	if t := sh.Trace; t != nil {
		rec.Trace = &traceRecord{Path: t.Path, TimeScale: t.TimeScale, RequestLimit: t.RequestLimit, MaxInflightSessions: t.MaxInflightSessions}
	}
	for _, t := range c.Targets {
		rec.URLs = append(rec.URLs, redactURL(t))
	}
	if c.Duration > 0 {
		rec.Duration = c.Duration.String()
	}
	if c.RequestTimeout > 0 {
		rec.RequestTimeout = c.RequestTimeout.String()
	}
	rec.ExtraBody = maps.Clone(c.Request.ExtraBody)
	rec.HeaderNames = slices.Sorted(maps.Keys(c.Request.Headers))
	return rec
}

// redactURL is u without its user info (a password in a URL is a secret).
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return u
	}
	p.User = nil
	return p.String()
}

// appendKeys adds keys to the end of a JSON object encoded as
// sweepdir.EncodeJSON does (two-space indent, final newline).
func appendKeys(obj []byte, keys []kv) ([]byte, error) {
	if len(keys) == 0 {
		return obj, nil
	}
	body := bytes.TrimRight(obj, "\n")
	body = bytes.TrimSuffix(body, []byte("}"))
	body = bytes.TrimRight(body, "\n ")
	var b bytes.Buffer
	b.Write(body)
	for i, e := range keys {
		if i > 0 || len(bytes.TrimSpace(body)) > 1 {
			b.WriteString(",")
		}
		var v bytes.Buffer
		enc := json.NewEncoder(&v)
		enc.SetEscapeHTML(false)
		enc.SetIndent("  ", "  ")
		if err := enc.Encode(e.v); err != nil {
			return nil, fmt.Errorf("load: encode %s: %w", e.k, err)
		}
		k, _ := json.Marshal(e.k)
		fmt.Fprintf(&b, "\n  %s: %s", k, bytes.TrimRight(v.Bytes(), "\n"))
	}
	b.WriteString("\n}\n")
	return b.Bytes(), nil
}
