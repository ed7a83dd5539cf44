package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"github.com/urfave/cli/v2"
)

// requestFlags are mbench load's options for what every request carries
// beyond its prompt and length, named as vllm bench serve names them.
func requestFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "header", Usage: "an extra request header, NAME=VALUE (vllm's form) or 'Name: value' (repeat); its value is never written to a file"},
		&cli.StringFlag{Name: "api-key-env", Usage: "send the value of this environment variable as Authorization: Bearer (vllm bench serve reads OPENAI_API_KEY); never written to a file"},
		&cli.StringFlag{Name: "extra-body", Usage: "a JSON object whose fields every request body gets (vllm's --extra-body)"},
		&cli.BoolFlag{Name: "ignore-eos", Value: true, Usage: "fixed output lengths (max_tokens = min_tokens = --output, ignore_eos); --ignore-eos=false lets the engine end at end-of-sequence, --output a cap"},
		&cli.Float64Flag{Name: "temperature", Usage: "sampling temperature (default: not sent, the engine's default; vllm bench serve sends 0)"},
		&cli.Float64Flag{Name: "top-p", Usage: "top_p sampling parameter"},
		&cli.IntFlag{Name: "top-k", Usage: "top_k sampling parameter (-1 or 0: off)"},
		&cli.Float64Flag{Name: "min-p", Usage: "min_p sampling parameter"},
		&cli.Float64Flag{Name: "presence-penalty", Usage: "presence_penalty sampling parameter"},
		&cli.Float64Flag{Name: "frequency-penalty", Usage: "frequency_penalty sampling parameter"},
		&cli.Float64Flag{Name: "repetition-penalty", Usage: "repetition_penalty sampling parameter"},
		&cli.StringFlag{Name: "served-model-name", Usage: "the model name requests carry (vllm's --served-model-name); the same as --model"},
		&cli.IntFlag{Name: "max-concurrency", Usage: "with --rate: at most N requests in flight; one due while N are in flight waits for a slot (vllm's --max-concurrency)"},
		&cli.StringFlag{Name: "percentiles", Value: "50,90,95,99", Usage: "percentiles of TTFT, TPOT, ITL and E2EL in summary_A.json (vllm's --metric-percentiles); p50, p90, p95 and p99 are always there"},
		&cli.StringFlag{Name: "label", Usage: "a label recorded in summary_A.json (vllm's --label)"},
		&cli.StringSliceFlag{Name: "metadata", Usage: "KEY=VALUE recorded in summary_A.json's metadata (repeat; vllm's --metadata)"},
	}
}

// recordFlags are the percentiles to report and the metadata to record.
func recordFlags(c *cli.Context) ([]float64, map[string]string, error) {
	pcts, err := results.ParsePercentiles(c.String("percentiles"))
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("load: --percentiles: %w", err)}
	}
	var meta map[string]string
	for _, kv := range c.StringSlice("metadata") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, nil, usageError{fmt.Errorf("load: --metadata %q: want KEY=VALUE", kv)}
		}
		if meta == nil {
			meta = map[string]string{}
		}
		meta[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return pcts, meta, nil
}

// requestFromFlags is the openloop.Request the flags ask for, the API key
// read from the environment variable named by --api-key-env.
func requestFromFlags(c *cli.Context) (openloop.Request, error) {
	q := openloop.Request{Headers: map[string]string{}, NaturalLength: !c.Bool("ignore-eos")}
	for _, h := range c.StringSlice("header") {
		name, value, err := splitHeader(h)
		if err != nil {
			return q, usageError{fmt.Errorf("load: --header: %w", err)}
		}
		q.Headers[name] = value
	}
	if env := c.String("api-key-env"); env != "" {
		if q.APIKey = os.Getenv(env); q.APIKey == "" {
			return q, usageError{fmt.Errorf("load: --api-key-env %s: the variable is not set or empty", env)}
		}
	}
	if eb := c.String("extra-body"); eb != "" {
		if err := json.Unmarshal([]byte(eb), &q.ExtraBody); err != nil || q.ExtraBody == nil {
			return q, usageError{fmt.Errorf("load: --extra-body: want a JSON object such as '{\"chat_template_kwargs\":{\"enable_thinking\":false}}'")}
		}
	}
	f := func(name string) *float64 {
		if !c.IsSet(name) {
			return nil
		}
		v := c.Float64(name)
		return &v
	}
	q.Sampling = openloop.Sampling{Temperature: f("temperature"), TopP: f("top-p"), MinP: f("min-p"),
		PresencePenalty: f("presence-penalty"), FrequencyPenalty: f("frequency-penalty"), RepetitionPenalty: f("repetition-penalty")}
	if c.IsSet("top-k") {
		k := c.Int("top-k")
		q.Sampling.TopK = &k
	}
	if err := q.Validate(); err != nil {
		return q, usageError{fmt.Errorf("load: %w", err)}
	}
	return q, nil
}

// splitHeader reads NAME=VALUE (vllm bench serve's --header) or
// "Name: value"; the error never quotes the value.
func splitHeader(h string) (string, string, error) {
	i := strings.IndexAny(h, ":=")
	if i <= 0 {
		return "", "", errors.New("want NAME=VALUE or 'Name: value'")
	}
	return strings.TrimSpace(h[:i]), strings.TrimSpace(h[i+1:]), nil
}

// modelFlag is the model name requests carry: --served-model-name or
// --model (not both, unless equal).
func modelFlag(c *cli.Context) (string, error) {
	m, s := c.String("model"), c.String("served-model-name")
	if m != "" && s != "" && m != s {
		return "", usageError{fmt.Errorf("load: --model %q and --served-model-name %q: requests carry one name; mbench needs no tokenizer, so give the served name", m, s)}
	}
	if s != "" {
		return s, nil
	}
	return m, nil
}
