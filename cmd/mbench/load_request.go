package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/mbench/mbench/openloop"
	"github.com/urfave/cli/v2"
)

// requestFromFlags is the openloop.Request the flags ask for, the API key
// read from the environment variable named by --api-key-env.
func requestFromFlags(c *cli.Context) (openloop.Request, error) {
	q := openloop.Request{Headers: map[string]string{}, NaturalLength: !c.Bool("ignore-eos")}
	for _, h := range c.StringSlice("header") { // NAME=VALUE (vllm bench serve's) or "Name: value"
		i := strings.IndexAny(h, ":=")
		if i <= 0 { // the error never quotes the value
			return q, usageError{errors.New("load: --header: want NAME=VALUE or 'Name: value'")}
		}
		q.Headers[strings.TrimSpace(h[:i])] = strings.TrimSpace(h[i+1:])
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
		return new(c.Float64(name))
	}
	q.Sampling = openloop.Sampling{Temperature: f("temperature"), TopP: f("top-p"), MinP: f("min-p"),
		PresencePenalty: f("presence-penalty"), FrequencyPenalty: f("frequency-penalty"), RepetitionPenalty: f("repetition-penalty")}
	if c.IsSet("top-k") {
		q.Sampling.TopK = new(c.Int("top-k"))
	}
	return q, nil // checked with the whole spec (openloop.Config.Validate)
}

// modelFlag is the model name requests carry: --served-model-name or
// --model (not both, unless equal).
func modelFlag(c *cli.Context) (string, error) {
	m, s := c.String("model"), c.String("served-model-name")
	if m != "" && s != "" && m != s {
		return "", usageError{fmt.Errorf("load: --model %q and --served-model-name %q: requests carry one name; mbench needs no tokenizer, so give the served name", m, s)}
	}
	return cmp.Or(s, m), nil
}
