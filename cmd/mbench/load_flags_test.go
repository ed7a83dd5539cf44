package main

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop"
	"go.yaml.in/yaml/v3"
)

// specRules is one bad value per rule of the run spec's Validate methods
// (openloop's Config, and through it Shape, Dist, Dataset, Arrival, Ramp,
// Request, Endpoint, TokenRange), the path its FieldError must carry, and
// the flag-table path that path resolves to ("" for a setting no flag of
// mbench load sets).
var specRules = []struct {
	path, flagPath string
	bad            func(c *openloop.Config)
}{
	{"targets", "targets", func(c *openloop.Config) { c.Targets = nil }},
	{"targets", "targets", func(c *openloop.Config) { c.Targets = []string{"ftp://x"} }},
	{"endpoint", "endpoint", func(c *openloop.Config) { c.Endpoint = "embeddings" }},
	{"request.headers", "request", func(c *openloop.Config) { c.Request.Headers = map[string]string{"a b": "1"} }},
	{"request.headers", "request", func(c *openloop.Config) { c.Request.Headers = map[string]string{"Host": "1"} }},
	{"request", "request", func(c *openloop.Config) {
		c.Request.Headers, c.Request.APIKey = map[string]string{"Authorization": "x"}, "k"
	}},
	{"request.headers", "request", func(c *openloop.Config) { c.Request.Headers = map[string]string{"A": "1\n"} }},
	{"request", "request", func(c *openloop.Config) { c.Request.APIKey = "a b" }},
	{"request.sampling.temperature", "request.sampling.temperature", func(c *openloop.Config) { c.Request.Sampling.Temperature = ptr(-1.0) }},
	{"request.sampling.top_p", "request.sampling.top_p", func(c *openloop.Config) { c.Request.Sampling.TopP = ptr(0.0) }},
	{"request.sampling.min_p", "request.sampling.min_p", func(c *openloop.Config) { c.Request.Sampling.MinP = ptr(2.0) }},
	{"request.sampling.presence_penalty", "request.sampling.presence_penalty", func(c *openloop.Config) { c.Request.Sampling.PresencePenalty = ptr(3.0) }},
	{"request.sampling.frequency_penalty", "request.sampling.frequency_penalty", func(c *openloop.Config) { c.Request.Sampling.FrequencyPenalty = ptr(-3.0) }},
	{"request.sampling.repetition_penalty", "request.sampling.repetition_penalty", func(c *openloop.Config) { c.Request.Sampling.RepetitionPenalty = ptr(0.0) }},
	{"request.sampling.top_k", "request.sampling.top_k", func(c *openloop.Config) { c.Request.Sampling.TopK = ptr(-2) }},
	{"request.extra_body", "request", func(c *openloop.Config) { c.Request.ExtraBody = map[string]json.RawMessage{"model": []byte(`"m"`)} }},
	{"request.extra_body", "request", func(c *openloop.Config) { c.Request.ExtraBody = map[string]json.RawMessage{"x": []byte(`{`)} }},

	{"shape.trace", "shape.trace", func(c *openloop.Config) {
		c.Shape = openloop.Shape{Trace: &openloop.Trace{Path: "t"}, Dataset: &openloop.Dataset{Path: "d", Format: "jsonl"}}
	}},
	{"shape.trace.path", "shape.trace", func(c *openloop.Config) { c.Shape = openloop.Shape{Trace: &openloop.Trace{}} }},
	{"shape.trace.time_scale", "shape.trace.time_scale", func(c *openloop.Config) { c.Shape = openloop.Shape{Trace: &openloop.Trace{Path: "t", TimeScale: -1}} }},
	{"shape.trace.request_limit", "shape.trace.request_limit", func(c *openloop.Config) {
		c.Shape = openloop.Shape{Trace: &openloop.Trace{Path: "t", RequestLimit: -1}}
	}},
	{"shape.trace.max_inflight_sessions", "shape.trace.max_inflight_sessions", func(c *openloop.Config) {
		c.Shape = openloop.Shape{Trace: &openloop.Trace{Path: "t", MaxInflightSessions: -1}}
	}},
	{"shape.dataset", "shape.dataset", func(c *openloop.Config) { c.Shape.Dataset = &openloop.Dataset{Path: "d", Format: "jsonl"} }},
	{"shape.output", "shape.output", func(c *openloop.Config) {
		c.Shape = openloop.Shape{Output: -1, Dataset: &openloop.Dataset{Path: "d", Format: "jsonl"}}
	}},
	{"shape.dataset.path", "shape.dataset", func(c *openloop.Config) { c.Shape = openloop.Shape{Dataset: &openloop.Dataset{Format: "jsonl"}} }},
	{"shape.dataset.format", "shape.dataset.format", func(c *openloop.Config) {
		c.Shape = openloop.Shape{Dataset: &openloop.Dataset{Path: "d", Format: "csv"}}
	}},
	{"shape.input", "shape.input", func(c *openloop.Config) { c.Shape.Input = 0 }},
	{"shape.output", "shape.output", func(c *openloop.Config) { c.Shape.Output = 5 << 20 }},
	{"shape.input_dist.min", "shape.input_dist", func(c *openloop.Config) { c.Shape.InputDist = &openloop.Dist{Kind: "uniform", Min: -1, Max: 2} }},
	{"shape.input_dist.max", "shape.input_dist", func(c *openloop.Config) { c.Shape.InputDist = &openloop.Dist{Kind: "lognormal", Max: 5 << 20} }},
	{"shape.input_dist.min", "shape.input_dist", func(c *openloop.Config) { c.Shape.InputDist = &openloop.Dist{Kind: "uniform", Max: 2} }},
	{"shape.input_dist.max", "shape.input_dist", func(c *openloop.Config) { c.Shape.InputDist = &openloop.Dist{Kind: "uniform", Min: 5, Max: 2} }},
	{"shape.input_dist.median", "shape.input_dist", func(c *openloop.Config) { c.Shape.InputDist = &openloop.Dist{Kind: "lognormal", P90: 5} }},
	{"shape.input_dist.p90", "shape.input_dist", func(c *openloop.Config) { c.Shape.InputDist = &openloop.Dist{Kind: "lognormal", Median: 5, P90: 5} }},
	{"shape.input_dist.max", "shape.input_dist", func(c *openloop.Config) {
		c.Shape.InputDist = &openloop.Dist{Kind: "lognormal", Median: 5, P90: 9, Min: 4, Max: 3}
	}},
	{"shape.input_dist.kind", "shape.input_dist", func(c *openloop.Config) { c.Shape.InputDist = &openloop.Dist{Kind: "normal"} }},
	{"shape.output_dist.kind", "", func(c *openloop.Config) { c.Shape.OutputDist = &openloop.Dist{Kind: "normal"} }},
	{"shape.prefix.num_prefixes", "shape.prefix.num_prefixes", func(c *openloop.Config) { c.Shape.Prefix = &openloop.Prefix{PrefixTokens: 2} }},
	{"shape.prefix.prefix_tokens", "shape.prefix", func(c *openloop.Config) { c.Shape.Prefix = &openloop.Prefix{NumPrefixes: 1} }},
	{"shape.prefix.prefix_tokens", "shape.prefix", func(c *openloop.Config) { c.Shape.Prefix = &openloop.Prefix{NumPrefixes: 1, PrefixTokens: 9} }},
	{"shape.cache_fill.prefixes", "", func(c *openloop.Config) { c.Shape.CacheFill = &openloop.CacheFill{Prefixes: -1} }},
	{"shape.cache_fill.prefix_tokens", "", func(c *openloop.Config) { c.Shape.CacheFill = &openloop.CacheFill{Prefixes: 1} }},

	{"warmup", "warmup", func(c *openloop.Config) { c.Warmup = -1 }},
	{"min_completed", "min_completed", func(c *openloop.Config) { c.MinCompleted = -1 }},
	{"requests", "requests", func(c *openloop.Config) { c.Requests = -1 }},
	{"rate", "rate", func(c *openloop.Config) { c.Shape, c.Rate = openloop.Shape{Trace: &openloop.Trace{Path: "t"}}, -1 }},
	{"rate", "rate", func(c *openloop.Config) { c.Arrival = openloop.Arrival{Process: "concurrency", InFlight: 1} }},
	{"rate", "rate", func(c *openloop.Config) { c.Rate = 0 }},
	{"rate", "rate", func(c *openloop.Config) { c.Rate = 2e6 }},
	{"requests", "requests", func(c *openloop.Config) { c.Requests = 0 }},
	{"rate", "rate", func(c *openloop.Config) { c.Rate, c.Requests, c.Duration = math.Inf(1), 0, time.Second }},

	{"arrival.in_flight", "arrival.in_flight", func(c *openloop.Config) { c.Arrival.InFlight = 2 }},
	{"arrival.ramp", "arrival.ramp", func(c *openloop.Config) {
		c.Rate, c.Arrival = 0, openloop.Arrival{Process: "concurrency", InFlight: 1, Ramp: &openloop.Ramp{}}
	}},
	{"arrival.ramp.kind", "arrival.ramp.kind", func(c *openloop.Config) { c.Arrival.Ramp = &openloop.Ramp{Kind: "step"} }},
	{"arrival.ramp.duration", "arrival.ramp.duration", func(c *openloop.Config) { c.Arrival.Ramp = &openloop.Ramp{Kind: "linear"} }},
	{"arrival.ramp.from", "arrival.ramp.from", func(c *openloop.Config) { c.Arrival.Ramp = &openloop.Ramp{Kind: "linear", Duration: 1, From: -1} }},
	{"arrival.ramp.from", "arrival.ramp.from", func(c *openloop.Config) { c.Arrival.Ramp = &openloop.Ramp{Kind: "exponential", Duration: 1} }},
	{"arrival.max_in_flight", "arrival.max_in_flight", func(c *openloop.Config) { c.Arrival.MaxInFlight = -1 }},
	{"arrival.in_flight", "arrival.in_flight", func(c *openloop.Config) {
		c.Rate, c.Arrival = 0, openloop.Arrival{Process: "concurrency", InFlight: openloop.MaxInFlight + 1}
	}},
	{"arrival.max_in_flight", "arrival.max_in_flight", func(c *openloop.Config) {
		c.Rate, c.Arrival = 0, openloop.Arrival{Process: "concurrency", InFlight: 1, MaxInFlight: 1}
	}},
	{"arrival.in_flight", "arrival.in_flight", func(c *openloop.Config) { c.Rate, c.Arrival = 0, openloop.Arrival{Process: "concurrency"} }},
	{"arrival.burstiness", "arrival.burstiness", func(c *openloop.Config) { c.Arrival = openloop.Arrival{Process: "gamma"} }},
	{"arrival.process", "arrival.process", func(c *openloop.Config) { c.Arrival = openloop.Arrival{Process: "uniform"} }},
	{"arrival.ramp", "arrival.ramp", func(c *openloop.Config) {
		c.Shape, c.Arrival = openloop.Shape{Trace: &openloop.Trace{Path: "t"}}, openloop.Arrival{Ramp: &openloop.Ramp{Kind: "linear", Duration: 1}}
	}},
	{"arrival.in_flight", "arrival.in_flight", func(c *openloop.Config) {
		c.Shape, c.Rate, c.Arrival = openloop.Shape{Trace: &openloop.Trace{Path: "t"}}, 0, openloop.Arrival{Process: "concurrency", InFlight: 1}
	}},

	{"duration", "duration", func(c *openloop.Config) { c.Duration = -1 }},
	{"timeout", "timeout", func(c *openloop.Config) { c.Timeout = -1 }},
	{"drain_timeout", "drain_timeout", func(c *openloop.Config) { c.DrainTimeout = -1 }},
	{"abort_if", "", func(c *openloop.Config) { c.AbortIf.MaxTTFT = -1 }},
	{"abort_if", "", func(c *openloop.Config) { c.AbortIf.MaxInflight = -1 }},
	{"request_timeout", "request_timeout", func(c *openloop.Config) { c.RequestTimeout = -1 }},
	{"stream_memory", "", func(c *openloop.Config) { c.StreamMemory = -1 }},
	{"token_ids", "token_ids", func(c *openloop.Config) { c.TokenIDs = openloop.TokenRange{Min: 5, Max: 3} }},
	{"request_id_prefix", "request_id_prefix", func(c *openloop.Config) { c.RequestIDPrefix = "\x01" }},
}

func ptr[T any](v T) *T { return &v }

// specMatrix sets every field of a shape, the arrival and the request, as
// a matrix names them (not a valid matrix: it sets them all at once).
const specMatrix = `
endpoint: chat
shapes:
  - name: s
    input: 8
    output: 4
    input_dist: {kind: lognormal, min: 1, max: 9, median: 4, p90: 8}
    output_dist: {kind: uniform, min: 1, max: 9, median: 4, p90: 8}
    prefix: {num_prefixes: 2, prefix_tokens: 4}
    cache_fill: {prefixes: 2, prefix_tokens: 4}
    trace: {path: t.jsonl, time_scale: 1, request_limit: 1, max_inflight_sessions: 1}
    dataset: {path: d.jsonl, format: jsonl}
arrival: {process: gamma, burstiness: 1, in_flight: 1, max_in_flight: 1, ramp: {kind: linear, from: 1, duration: 1s}}
request:
  headers: {A: b}
  extra_body: {x: 1}
  sampling: {temperature: 1, top_p: 1, top_k: 1, min_p: 0, presence_penalty: 0, frequency_penalty: 0, repetition_penalty: 1}
`

// TestSpecRulesHavePaths: every rule of the run spec refuses its bad value
// with a FieldError whose path (a) mbench load's flag table resolves, to a
// flag's row or to the section of a flag the user set, as flagError does,
// and (b) where the matrix sets that field, names its YAML node (shape
// paths under shapes[i]; the run-level settings the matrix words its own
// way, rates and measure.*, have no matrix node to name). A new rule
// without a path, or with one the flags or the matrix do not know, fails.
func TestSpecRulesHavePaths(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(specMatrix), &doc); err != nil {
		t.Fatal(err)
	}
	for i, r := range specRules {
		c := openloop.Config{Targets: []string{"http://127.0.0.1:1"}, Rate: 1, Requests: 10, Shape: openloop.Shape{Name: "s", Input: 8, Output: 4}}
		r.bad(&c)
		err := c.Validate()
		var fe *openloop.FieldError
		if !errors.As(err, &fe) || fe.Path != r.path {
			t.Errorf("rule %d: %v (%#v), want a FieldError at %s", i, err, fe, r.path)
			continue
		}
		if got := flagPathOf(fe.Path); got != r.flagPath {
			t.Errorf("rule %d: %s resolves to the flag row %q, want %q", i, fe.Path, got, r.flagPath)
		}
		root, _, _ := strings.Cut(fe.Path, ".")
		if root != "shape" && root != "arrival" && root != "request" && root != "endpoint" {
			continue
		}
		if !yamlHas(doc.Content[0], strings.Replace(fe.Path, "shape.", "shapes.0.", 1)) {
			t.Errorf("rule %d: %s names no key of a matrix that sets every field", i, fe.Path)
		}
	}
}

// flagPathOf is the table path flagError resolves path to when the user
// set every flag: the longest prefix of path that is a row's, or a section
// below the top level with a row under it ("arrival.ramp").
func flagPathOf(path string) string {
	segs := strings.Split(path, ".")
	for n := len(segs); n > 0; n-- {
		p := strings.Join(segs[:n], ".")
		for _, f := range loadFlagTable() {
			if f.path == p || strings.HasPrefix(f.path, p+".") && n > 1 {
				return p
			}
		}
	}
	return ""
}

// yamlHas reports whether the dotted path (a list index as a segment) names
// a node of n.
func yamlHas(n *yaml.Node, path string) bool {
	for _, seg := range strings.Split(path, ".") {
		var next *yaml.Node
		switch i, err := strconv.Atoi(seg); {
		case n.Kind == yaml.SequenceNode && err == nil && i < len(n.Content):
			next = n.Content[i]
		case n.Kind == yaml.MappingNode:
			for k := 0; k+1 < len(n.Content); k += 2 {
				if n.Content[k].Value == seg {
					next = n.Content[k+1]
				}
			}
		}
		if next == nil {
			return false
		}
		n = next
	}
	return true
}
