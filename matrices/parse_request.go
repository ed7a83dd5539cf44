package matrices

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/mbench/mbench/openloop"
	"go.yaml.in/yaml/v3"
)

// Request is the matrix's request section: what every request of the sweep
// carries beyond its prompt and length (openloop.Request), named as
// vllm bench serve names it.
//
//	request:
//	  headers: {X-Tenant: team-a}        # values are never recorded
//	  api_key_env: OPENAI_API_KEY        # Authorization: Bearer $OPENAI_API_KEY, read when the sweep runs
//	  ignore_eos: false                  # natural lengths (default true: max_tokens = min_tokens, ignore_eos)
//	  sampling: {temperature: 0.7, top_p: 0.9, top_k: 50, min_p: 0.05,
//	             presence_penalty: 0, frequency_penalty: 0, repetition_penalty: 1}
//	  extra_body: {chat_template_kwargs: {enable_thinking: false}}
//	  served_model_name: my-model        # the model name requests carry (default engine.model)
type Request struct {
	Headers         map[string]string
	APIKeyEnv       string // environment variable holding the API key ("" = none)
	IgnoreEOS       bool   // default true
	Sampling        openloop.Sampling
	ExtraBody       map[string]json.RawMessage
	ServedModelName string
}

// request decodes the request section; the options are checked by the load
// generator's own rules (openloop.Request.Validate).
func (d *decoder) request(v *yaml.Node, m *Matrix) {
	if v == nil {
		return
	}
	q := &Request{IgnoreEOS: true}
	n := len(d.errs)
	d.object(v, "request", v.Line, []field{
		{"headers", false, func(v *yaml.Node, p string) {
			ps, _ := d.mapping(v, p)
			q.Headers = map[string]string{}
			for _, kv := range ps {
				q.Headers[kv.key], _ = d.str(kv.v, join(p, kv.key))
				if n := d.deref(kv.v); n != nil { // a header may carry a credential
					d.secret(n)
				}
				// Each header checked at its own line (a CRLF in a value
				// was reported at request:'s).
				one := openloop.Request{Headers: map[string]string{kv.key: q.Headers[kv.key]}}
				if err := one.Validate(); err != nil {
					_, msg := requestRule(err)
					d.add(kv.v.Line, join(p, kv.key), "a header name and a value without control characters (CR, LF, NUL), not one mbench sets itself", "%s", msg)
				}
			}
		}},
		{"api_key_env", false, func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && !envNameRE.MatchString(s) {
				d.add(v.Line, p, "an environment variable name such as OPENAI_API_KEY", "invalid name %q", s)
			} else {
				q.APIKeyEnv = s
			}
		}},
		{"ignore_eos", false, func(v *yaml.Node, p string) { q.IgnoreEOS = d.boolean(v, p) }},
		{"sampling", false, func(v *yaml.Node, p string) { q.Sampling = d.sampling(v, p) }},
		{"extra_body", false, func(v *yaml.Node, p string) {
			ps, _ := d.mapping(v, p)
			q.ExtraBody = map[string]json.RawMessage{}
			for _, kv := range ps {
				var x any
				if err := kv.v.Decode(&x); err != nil {
					d.add(kv.v.Line, join(p, kv.key), "a YAML value that JSON can carry", "%v", err)
					continue
				}
				js, err := json.Marshal(x)
				if err != nil {
					d.add(kv.v.Line, join(p, kv.key), "a YAML value that JSON can carry (string keys, no .inf)", "%v", err)
					continue
				}
				q.ExtraBody[kv.key] = js
			}
		}},
		{"served_model_name", false, func(v *yaml.Node, p string) { q.ServedModelName = d.nonEmpty(v, p) }},
	})
	if len(d.errs) > n {
		return
	}
	lq := q.load("")
	if err := lq.Validate(); err != nil {
		path, msg := requestRule(err)
		d.add(cmp.Or(d.lines[path], v.Line), path, "options vllm serve accepts (docs/loadgen.md, Request options)", "%s", msg)
		return
	}
	m.Request = q
}

// requestRule is the path of a request rule that is broken (placed at its
// key where written: request.sampling.top_p) and its message from the
// path's last segment on, whose words name the header, body field or
// parameter there (`header "X-A": …`, `top_p 0: …`).
func requestRule(err error) (path, msg string) {
	fe := &openloop.FieldError{Path: "request", Msg: err.Error()}
	errors.As(err, &fe)
	return fe.Path, fe.Tail(max(strings.Count(fe.Path, "."), 1))
}

// sampling decodes request.sampling: each parameter a number (top_k an
// integer), signed where vLLM allows it.
func (d *decoder) sampling(v *yaml.Node, path string) openloop.Sampling {
	var s openloop.Sampling
	num := func(dst **float64) func(*yaml.Node, string) {
		return func(v *yaml.Node, p string) {
			var x float64
			if tag := v.ShortTag(); v.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") || v.Decode(&x) != nil || math.IsInf(x, 0) || math.IsNaN(x) {
				d.add(v.Line, p, "a number", "expected a number, got %s", describe(v))
				return
			}
			*dst = &x
		}
	}
	d.object(v, path, v.Line, []field{
		{"temperature", false, num(&s.Temperature)},
		{"top_p", false, num(&s.TopP)},
		{"top_k", false, func(v *yaml.Node, p string) {
			k := d.intField(v, p, -1, 1<<31-1)
			s.TopK = &k
		}},
		{"min_p", false, num(&s.MinP)},
		{"presence_penalty", false, num(&s.PresencePenalty)},
		{"frequency_penalty", false, num(&s.FrequencyPenalty)},
		{"repetition_penalty", false, num(&s.RepetitionPenalty)},
	})
	return s
}

// load is the load generator's request options with the given API key.
func (q *Request) load(apiKey string) openloop.Request {
	return openloop.Request{Headers: q.Headers, APIKey: apiKey, NaturalLength: !q.IgnoreEOS, Sampling: q.Sampling, ExtraBody: q.ExtraBody}
}

// LoadRequest is the load generator's request options for this matrix, the
// API key read from the environment variable request.api_key_env names; an
// error when that variable is not set (before anything launches).
func (m *Matrix) LoadRequest() (openloop.Request, error) {
	if m.Request == nil {
		return openloop.Request{}, nil
	}
	key := ""
	if env := m.Request.APIKeyEnv; env != "" {
		if key = os.Getenv(env); key == "" {
			return openloop.Request{}, fmt.Errorf("matrix %s: request.api_key_env: the environment variable %s is not set or empty", m.File, env)
		}
	}
	return m.Request.load(key), nil
}

// RequestModel is the model name the requests carry:
// request.served_model_name, else engine.model.
func (m *Matrix) RequestModel() string {
	if m.Request != nil && m.Request.ServedModelName != "" {
		return m.Request.ServedModelName
	}
	return m.Engine.Model
}

// requestSpec is the request section of a cell spec and of the resolved
// matrix: header names (their values are not recorded: a header may carry
// a credential), the API key's variable name (never its value), and the
// options that change the workload.
func (q *Request) spec() map[string]any {
	names := make([]string, 0, len(q.Headers))
	for k := range q.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	s := map[string]any{"headers": names, "api_key_env": q.APIKeyEnv, "ignore_eos": q.IgnoreEOS, "sampling": q.Sampling,
		"served_model_name": q.ServedModelName}
	if len(q.ExtraBody) > 0 {
		s["extra_body"] = q.ExtraBody
	}
	return s
}
