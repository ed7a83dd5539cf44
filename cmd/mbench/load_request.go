package main

import (
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
	return q, nil // checked with the whole spec (openloop.Config.Validate)
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
