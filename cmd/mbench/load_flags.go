package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"github.com/urfave/cli/v2"
)

// specFlag is one row of mbench load's flag table: a flag, with
// vllm bench serve's names for it among its aliases, and the path of the
// load spec's field it sets, as the Path of openloop.Config.Validate's
// FieldError names it. The table is the one place where vLLM's names are declared and
// where a spec path is turned back into the flag the user typed; the rules
// themselves live with the spec (openloop's Validate), written once.
type specFlag struct {
	path   string // the spec field's path ("rate", "arrival.ramp.from"); "" for flags that set no spec field
	secret bool   // never quote its value in a message
	flag   cli.Flag
}

// loadFlagTable is every flag of mbench load. Defaults follow mbench where
// vLLM's differ only in ways docs/loadgen.md explains; the flags vLLM
// defaults but a user may leave unset (--request-rate inf, --num-prompts
// 1000, --random-input-len 1024, …) are applied in loadSpec, so that
// mbench's own forms (--duration, --concurrency, --trace) keep theirs.
func loadFlagTable() []specFlag {
	return []specFlag{
		// Where the load goes.
		{"targets", false, &cli.StringSliceFlag{Name: "url", Aliases: []string{"base-url"}, Usage: "base URL of the endpoint (repeat to round-robin; default http://--host:--port)"}},
		{"targets", false, &cli.StringFlag{Name: "host", Value: "127.0.0.1", Usage: "the endpoint's host when --base-url is not given"}},
		{"targets", false, &cli.IntFlag{Name: "port", Value: 8000, Usage: "the endpoint's port when --base-url is not given"}},
		{"endpoint", false, &cli.StringFlag{Name: "endpoint", Usage: "completions | chat, or the path: /v1/completions | /v1/chat/completions (default: completions, or as --backend says)"}},
		{"endpoint", false, &cli.StringFlag{Name: "backend", Aliases: []string{"endpoint-type"}, Usage: "openai | vllm (completions) | openai-chat (chat)"}},
		{"model", false, &cli.StringFlag{Name: "model", Usage: "model name (default: the first of /v1/models)"}},
		{"model", false, &cli.StringFlag{Name: "served-model-name", Usage: "the model name requests carry; the same as --model (mbench needs no tokenizer)"}},
		{"", false, &cli.StringFlag{Name: "tokenizer", Usage: "recorded as tokenizer_id only: mbench counts tokens from the engine's usage, with no tokenizer of its own"}},
		{"token_ids", false, &cli.StringFlag{Name: "token-ids", Usage: "prompt token ids drawn from MIN:MAX (half-open; default: 1000:31000, cut to the vocabulary where /v1/models says its size)"}},
		{"request", true, &cli.StringSliceFlag{Name: "header", Usage: "an extra request header, NAME=VALUE or 'Name: value' (repeat, or several after one --header); its value is never written to a file"}},
		{"request", true, &cli.StringFlag{Name: "api-key-env", Usage: "send the value of this environment variable as Authorization: Bearer (vllm bench serve reads OPENAI_API_KEY); never written to a file"}},
		{"request", false, &cli.StringFlag{Name: "extra-body", Usage: "a JSON object whose fields every request body gets"}},
		{"request", false, &cli.BoolFlag{Name: "ignore-eos", Value: true, Usage: "fixed output lengths (max_tokens = min_tokens, ignore_eos); --ignore-eos=false lets the engine end at end-of-sequence, the length a cap"}},
		{"request.sampling.temperature", false, &cli.Float64Flag{Name: "temperature", Usage: "sampling temperature (unset: not sent, the engine's default, as vllm bench serve)"}},
		{"request.sampling.top_p", false, &cli.Float64Flag{Name: "top-p", Usage: "top_p (unset: not sent)"}},
		{"request.sampling.top_k", false, &cli.IntFlag{Name: "top-k", Usage: "top_k, -1 or 0 off (unset: not sent)"}},
		{"request.sampling.min_p", false, &cli.Float64Flag{Name: "min-p", Usage: "min_p (unset: not sent)"}},
		{"request.sampling.presence_penalty", false, &cli.Float64Flag{Name: "presence-penalty", Usage: "presence_penalty (unset: not sent)"}},
		{"request.sampling.frequency_penalty", false, &cli.Float64Flag{Name: "frequency-penalty", Usage: "frequency_penalty (unset: not sent)"}},
		{"request.sampling.repetition_penalty", false, &cli.Float64Flag{Name: "repetition-penalty", Usage: "repetition_penalty (unset: not sent)"}},
		{"request_id_prefix", false, &cli.StringFlag{Name: "request-id-prefix", Usage: "start of every X-Request-Id (default mbench-<random>-)"}},

		// What each request asks for.
		{"", false, &cli.StringFlag{Name: "dataset-name", Usage: "random | prefix_repetition (token-id prompts) | sharegpt | custom (prompts from --dataset-path) (default: random, or as --dataset/--trace say)"}},
		{"shape.input", false, &cli.IntFlag{Name: "input", Aliases: []string{"random-input-len", "input-len"}, Usage: "prompt length in tokens (default with --dataset-name random: 1024, as vLLM)"}},
		{"shape.output", false, &cli.IntFlag{Name: "output", Aliases: []string{"random-output-len", "output-len"}, Usage: "output tokens per request (default with --dataset-name random: 128, as vLLM; with a dataset: the file's)"}},
		{"shape.input_dist", false, &cli.StringFlag{Name: "random-range-ratio", Usage: "random: lengths uniform in [len·(1−r), len·(1+r)], r in [0, 1), or '{\"input\": r, \"output\": r}'"}},
		{"shape.prefix", false, &cli.IntFlag{Name: "random-prefix-len", Usage: "random: a prefix of this many tokens shared by every prompt, before the --random-input-len ones"}},
		{"shape.prefix", false, &cli.IntFlag{Name: "prefix-repetition-prefix-len", Value: 256, Usage: "prefix_repetition: tokens of each shared prefix"}},
		{"shape.input", false, &cli.IntFlag{Name: "prefix-repetition-suffix-len", Value: 256, Usage: "prefix_repetition: tokens after the prefix"}},
		{"shape.prefix.num_prefixes", false, &cli.IntFlag{Name: "prefix-repetition-num-prefixes", Value: 10, Usage: "prefix_repetition: distinct prefixes"}},
		{"shape.output", false, &cli.IntFlag{Name: "prefix-repetition-output-len", Value: 128, Usage: "prefix_repetition: output tokens per request"}},
		{"shape.dataset", false, &cli.StringFlag{Name: "dataset", Aliases: []string{"dataset-path"}, Usage: "prompts from a file, sampled with --seed (--output, when set, overrides its output lengths)"}},
		{"shape.dataset.format", false, &cli.StringFlag{Name: "dataset-format", Usage: "sharegpt | jsonl (default: as --dataset-name says, else by extension: .json sharegpt, .jsonl jsonl)"}},
		{"shape.output", false, &cli.IntFlag{Name: "sharegpt-output-len", Usage: "sharegpt: output tokens per request (default: the file's)"}},
		{"shape.output", false, &cli.IntFlag{Name: "custom-output-len", Value: 256, Usage: "custom: output tokens of a prompt whose line gives none"}},
		{"shape.trace", false, &cli.StringFlag{Name: "trace", Usage: "replay a Mooncake-format trace (rate becomes a multiplier)"}},
		{"shape.trace.time_scale", false, &cli.Float64Flag{Name: "time-scale", Value: 1, Usage: "trace time compression (2 replays it twice as fast)"}},
		{"shape.trace.request_limit", false, &cli.IntFlag{Name: "request-limit", Usage: "trace: at most this many requests (unset: all)"}},
		{"shape.trace.max_inflight_sessions", false, &cli.IntFlag{Name: "max-inflight-sessions", Usage: "trace: sessions in flight at once (unset: unlimited)"}},

		// When requests are sent.
		{"rate", false, &cli.Float64Flag{Name: "rate", Aliases: []string{"request-rate"}, Usage: "offered request rate (req/s), or inf: every request at once (default inf with --num-prompts, as vLLM)"}},
		{"arrival.in_flight", false, &cli.IntFlag{Name: "concurrency", Usage: "closed loop: keep N requests in flight, a new one sent as one finishes (unset: none, an open loop at --rate)"}},
		{"arrival.max_in_flight", false, &cli.IntFlag{Name: "max-concurrency", Usage: "at most N requests in flight; one due while N are in flight waits for a slot (unset: no cap)"}},
		{"arrival.process", false, &cli.StringFlag{Name: "arrival", Usage: strings.Join(openloop.ArrivalProcesses, " | ") + " (default poisson; gamma when --burstiness is not 1)"}},
		{"arrival.burstiness", false, &cli.Float64Flag{Name: "burstiness", Value: 1, Usage: "gamma shape b: gaps ~ Gamma(b, 1/(rate·b)); 1 is Poisson, inf constant"}},
		{"arrival.ramp.kind", false, &cli.StringFlag{Name: "ramp", Aliases: []string{"ramp-up-strategy"}, Usage: "ramp the rate up: linear | exponential"}},
		{"arrival.ramp.from", false, &cli.Float64Flag{Name: "ramp-from", Aliases: []string{"ramp-up-start-rps"}, Usage: "ramp: the rate at the start (req/s)"}},
		{"rate", false, &cli.Float64Flag{Name: "ramp-up-end-rps", Usage: "ramp: the rate at the end (the same as --rate)"}},
		{"arrival.ramp.duration", false, &cli.DurationFlag{Name: "ramp-duration", Usage: "ramp: how long the rate takes to reach --rate (default with --num-prompts: the expected time of all of them, as vLLM ramps over the whole run)"}},
		{"", false, &cli.BoolFlag{Name: "include-ramp", Usage: "ramp: measure the ramp's requests too (default: not measured, unless the ramp was given in vLLM's names)"}},
		{"", false, &cli.IntFlag{Name: "ready-check-timeout-sec", Usage: "wait up to this many seconds for the endpoint to list its models before the run (unset: no wait)"}},

		// How long, and what is measured.
		{"requests", false, &cli.IntFlag{Name: "requests", Aliases: []string{"num-prompts"}, Usage: "measured requests to send (default 1000 when no --duration or --min-completed, as vLLM)"}},
		{"duration", false, &cli.DurationFlag{Name: "duration", Usage: "send for this long (unset: until --num-prompts are sent)"}},
		{"min_completed", false, &cli.IntFlag{Name: "min-completed", Usage: "measure until this many requests completed (unset: none)"}},
		{"warmup", false, &cli.IntFlag{Name: "warmup", Aliases: []string{"num-warmups"}, Usage: "warmup requests, sent first and not measured"}},
		{"", false, &cli.Int64Flag{Name: "seed", Value: 1, Usage: "workload seed"}},
		{"timeout", false, &cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "cap on the measured phase"}},
		{"drain_timeout", false, &cli.DurationFlag{Name: "drain-timeout", Value: time.Minute, Usage: "wait this long for in-flight requests after sending stops"}},
		{"request_timeout", false, &cli.DurationFlag{Name: "request-timeout", Usage: "fail a request (error class timeout) that runs longer than this (unset: none)"}},

		// What is recorded and printed.
		{"", false, &cli.StringFlag{Name: "percentiles", Aliases: []string{"metric-percentiles"}, Value: "50,90,95,99", Usage: "percentiles of TTFT, TPOT, ITL and E2EL to report; p50, p90, p95 and p99 are always in summary_A.json"}},
		{"", false, &cli.StringFlag{Name: "percentile-metrics", Value: "ttft,tpot,itl,e2el", Usage: "the metrics whose statistics the summary table and the --save-result file carry"}},
		{"", false, &cli.StringSliceFlag{Name: "slo", Aliases: []string{"goodput"}, Usage: "per-request SLO for goodput: ttft_ms=MS,tpot_ms=MS,e2el_ms=MS, or vLLM's ttft:MS tpot:MS"}},
		{"", false, &cli.Float64Flag{Name: "max-failed", Value: results.DefaultMaxErrorRate, Usage: "the run is not a result (exit 3) when more than this share of the measured requests failed"}},
		{"", false, &cli.StringFlag{Name: "label", Usage: "a label recorded with the result (and the --save-result file name's start)"}},
		{"", false, &cli.StringSliceFlag{Name: "metadata", Usage: "KEY=VALUE recorded with the result (repeat, or several after one --metadata)"}},
		{"", false, &cli.StringFlag{Name: "out", Usage: "directory for requests.jsonl and summary_A.json (default: mbench-load-DATE under --result-dir)"}},
		{"", false, &cli.BoolFlag{Name: "save-result", Usage: "also write vllm bench serve's result file (--result-dir/--result-filename)"}},
		{"", false, &cli.StringFlag{Name: "result-dir", Usage: "directory of the --save-result file (default: the current one)"}},
		{"", false, &cli.StringFlag{Name: "result-filename", Usage: "name of the --save-result file (default: LABEL-RATEqps[-concurrencyN]-MODEL-DATE.json, as vLLM)"}},
		{"", false, &cli.StringFlag{Name: "format", Value: "text", Usage: "what stdout carries at the end: text (the summary table and the verdict) | json (summary_A.json)"}},
		{"", false, &cli.BoolFlag{Name: "disable-tqdm", Usage: "no progress bar or progress lines on stderr"}},

		// Several runs from one command.
		{"", false, &cli.StringFlag{Name: "profile", Usage: "sweep: synchronous (one request at a time), then throughput (all at once), then --sweep-rates Poisson rates evenly between, as GuideLLM's sweep profile; a table of rate against TTFT, TPOT, throughput and verdict (unset: one run)"}},
		{"", false, &cli.IntFlag{Name: "sweep-rates", Value: 5, Usage: "--profile sweep: the rates between synchronous and throughput"}},
	}
}

// vllmUnsupported are vllm bench serve's flags that mbench load accepts by
// name only to refuse them with what to do instead; bool ones take no value.
var vllmUnsupported = []struct {
	name string
	bool bool
	hint string
}{
	{"use-beam-search", true, "mbench load sends sampled streaming requests only"},
	{"logprobs", false, "logprobs are not requested; put them in --extra-body '{\"logprobs\": N}'"},
	{"save-detailed", true, "every request's record is in --out's requests.jsonl"},
	{"append-result", true, "give each run its own --result-filename"},
	{"lora-modules", false, "give one LoRA adapter as --model"},
	{"self-timed", true, "use --trace for a trace's own send times"},
	{"probe-request-rate", false, "not supported"},
	{"insecure", true, "https is verified; use http:// for a test server"},
	{"plot-timeline", true, "mbench run's reports plot a sweep; requests.jsonl has every request's times"},
	{"plot-dataset-stats", true, "requests.jsonl has every request's lengths"},
	{"skip-tokenizer-init", true, "mbench needs no tokenizer: leave it out"},
	{"trust-remote-code", true, "mbench needs no tokenizer: leave it out"},
	{"tokenizer-mode", false, "mbench needs no tokenizer: leave it out"},
	{"chat-template-kwargs", false, "put them in --extra-body '{\"chat_template_kwargs\": {...}}'"},
}

// loadFlags is the table's flags, and the vLLM flags mbench refuses. A
// usage that ends in "(default …)" or "(unset: …)" says the default in
// words: the help shows it once, as the default, not beside the zero value.
func loadFlags() []cli.Flag {
	var fs []cli.Flag
	for _, f := range loadFlagTable() {
		defaultInWords(f.flag)
		fs = append(fs, f.flag)
	}
	for _, u := range vllmUnsupported {
		if u.bool {
			fs = append(fs, &cli.BoolFlag{Name: u.name, Hidden: true})
		} else {
			fs = append(fs, &cli.StringFlag{Name: u.name, Hidden: true})
		}
	}
	return fs
}

// usageDefaultRE is a default said in words at the end of a usage.
var usageDefaultRE = regexp.MustCompile(`\s*\((?:default:?|unset:) ((?:[^()]|\([^()]*\))*)\)$`)

// defaultInWords moves the default a usage says in words into the flag's
// DefaultText.
func defaultInWords(f cli.Flag) {
	usage, text, _ := flagFields(f)
	if usage == nil {
		return
	}
	if m := usageDefaultRE.FindStringSubmatchIndex(*usage); m != nil {
		*text = (*usage)[m[2]:m[3]]
		*usage = (*usage)[:m[0]]
	}
}

// refuseUnsupported refuses a vLLM flag mbench does not implement.
func refuseUnsupported(c *cli.Context) error {
	for _, u := range vllmUnsupported {
		if c.IsSet(u.name) {
			return usageError{fmt.Errorf("load: --%s (vllm bench serve's) is not supported: %s", u.name, u.hint)}
		}
	}
	return nil
}

// nargsFlags take several values after one flag in vllm bench serve
// (argparse nargs): `--goodput ttft:100 tpot:50`, `--header a=1 b=2`.
var nargsFlags = []string{"goodput", "header", "metadata"}

// vllmProfile is --profile as vllm bench serve's bare switch (start the
// engine's profiler), told apart from mbench's --profile sweep by having
// no value.
const vllmProfile = "vllm"

// expandNargs rewrites `--goodput ttft:100 tpot:50` as `--goodput ttft:100
// --goodput tpot:50` (and so for --header and --metadata), so that vLLM's
// command lines parse as typed.
func expandNargs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if (a == "--profile" || a == "-profile") && (i+1 == len(args) || strings.HasPrefix(args[i+1], "-")) {
			out = append(out, "--profile="+vllmProfile)
			continue
		}
		out = append(out, a)
		name := strings.TrimLeft(a, "-")
		if !strings.HasPrefix(a, "-") || strings.Contains(name, "=") || !slices.Contains(nargsFlags, name) || i+1 >= len(args) {
			continue
		}
		i++
		out = append(out, args[i])
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && strings.ContainsAny(args[i+1], ":=") {
			i++
			out = append(out, a, args[i])
		}
	}
	return out
}

// typedFlags maps each flag name the user typed to itself, so that a
// message names a flag as typed (--request-rate, not --rate).
type typedFlags map[string]bool

// typedNames reads the flag names of a command line.
func typedNames(args []string) typedFlags {
	t := typedFlags{}
	for _, a := range args {
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			t[name] = true
		}
	}
	return t
}

// as is the name of f as the user typed it, else its first name.
func (t typedFlags) as(f cli.Flag) string {
	for _, n := range f.Names() {
		if t[n] {
			return n
		}
	}
	return f.Names()[0]
}

// flagError turns a spec validation error into one naming the flag that
// sets the field, as the user typed it (value quoted unless secret): the
// longest path of the table that prefixes the error's path wins, and
// among rows of that path the one the user set; a path with no row of its
// own (a rule over a section, "arrival.ramp") names the flag under it that
// the user set. An error the table does not place is returned as it is.
func flagError(c *cli.Context, typed typedFlags, err error) error {
	var fe *openloop.FieldError
	if !errors.As(err, &fe) {
		return usageError{fmt.Errorf("load: %w", err)}
	}
	segs := strings.Split(fe.Path, ".")
	table := loadFlagTable()
	isSet := func(f specFlag) bool { return c.IsSet(f.flag.Names()[0]) }
	for n := len(segs); n > 0; n-- {
		path := strings.Join(segs[:n], ".")
		rows := slices.DeleteFunc(slices.Clone(table), func(f specFlag) bool { return f.path != path })
		if len(rows) == 0 {
			// A rule over a whole section ("arrival.ramp") names the flag
			// of it that the user set (--ramp).
			if i := slices.IndexFunc(table, func(f specFlag) bool { return strings.HasPrefix(f.path, path+".") && isSet(f) }); i >= 0 {
				rows = table[i : i+1]
			}
		}
		if len(rows) == 0 {
			continue
		}
		row := rows[max(0, slices.IndexFunc(rows, isSet))]
		name, v := typed.as(row.flag), c.Value(row.flag.Names()[0])
		if _, slice := v.([]string); !row.secret && isSet(row) && !slice {
			return usageError{fmt.Errorf("load: --%s %v: %s", name, v, fe.Tail(n))}
		}
		return usageError{fmt.Errorf("load: --%s: %s", name, fe.Tail(n))}
	}
	return usageError{fmt.Errorf("load: %w", err)}
}
