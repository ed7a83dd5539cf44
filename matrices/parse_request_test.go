package matrices

import (
	"strings"
	"testing"
)

// TestRequestSection: the request section reaches the load generator's
// options; header names, the key's variable name and the workload options
// enter the cell ids and the resolved matrix, header values and the key
// never do; bad options are refused at their line.
func TestRequestSection(t *testing.T) {
	const base = "name: t\nseed: 1\nengine: {kind: sim}\nconfigs: {plain: {}}\nrates: [1]\nshapes: [{input: 16, output: 4}]\nmeasure: {min_completed: 10}\n"
	plain, err := Parse("m.yaml", []byte(base))
	if err != nil || plain.Request != nil {
		t.Fatalf("without request: %+v, %v", plain.Request, err)
	}
	if q, err := plain.LoadRequest(); err != nil || q.NaturalLength || len(q.Headers) != 0 {
		t.Errorf("default options: %+v, %v", q, err)
	}
	t.Setenv("MBENCH_PLANTED_KEY", "sk-planted-matrix-key")
	const sec = "request:\n  headers: {X-Tenant: secret-header-value}\n  api_key_env: MBENCH_PLANTED_KEY\n  ignore_eos: false\n" +
		"  sampling: {temperature: 0.7, top_k: 40, frequency_penalty: -0.5}\n  extra_body: {chat_template_kwargs: {enable_thinking: false}}\n" +
		"  served_model_name: served\narrival: {max_in_flight: 8}\n"
	m, err := Parse("m.yaml", []byte(base+sec))
	if err != nil {
		t.Fatal(err)
	}
	q, err := m.LoadRequest()
	if err != nil {
		t.Fatal(err)
	}
	if q.APIKey != "sk-planted-matrix-key" || !q.NaturalLength || q.Headers["X-Tenant"] != "secret-header-value" ||
		*q.Sampling.Temperature != 0.7 || *q.Sampling.TopK != 40 || *q.Sampling.FrequencyPenalty != -0.5 ||
		string(q.ExtraBody["chat_template_kwargs"]) != `{"enable_thinking":false}` || m.RequestModel() != "served" || m.Arrival.MaxInFlight != 8 {
		t.Errorf("options: %+v (model %s, cap %d)", q, m.RequestModel(), m.Arrival.MaxInFlight)
	}
	js, err := m.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"headers":["X-Tenant"]`, `"api_key_env":"MBENCH_PLANTED_KEY"`, `"ignore_eos":false`, `"max_in_flight":8`, `"temperature":0.7`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("resolved matrix lacks %s: %s", want, js)
		}
	}
	for _, never := range []string{"secret-header-value", "sk-planted-matrix-key"} {
		if strings.Contains(string(js), never) {
			t.Errorf("resolved matrix records %q", never)
		}
	}
	if got := m.Redact("a line with sk-planted-matrix-key in it"); strings.Contains(got, "sk-planted") {
		t.Errorf("the API key is not redacted: %q", got)
	}
	if m.Cells()[0].ID == plain.Cells()[0].ID {
		t.Error("natural lengths and sampling did not change the cell id")
	}
	t.Setenv("MBENCH_PLANTED_KEY", "")
	if _, err := m.LoadRequest(); err == nil || !strings.Contains(err.Error(), "MBENCH_PLANTED_KEY is not set") {
		t.Errorf("unset key variable: %v", err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"request: {headers: {Content-Length: 3}}", "m.yaml:8: request"},
		{"request: {sampling: {top_p: 0}}", "top_p 0"},
		{"request: {sampling: {temperature: hot}}", "m.yaml:8: request.sampling.temperature"},
		{"request: {sampling: {top_k: -2}}", "request.sampling.top_k"},
		{"request: {extra_body: {max_tokens: 3}}", `"max_tokens": mbench writes it`},
		{"request:\n  sampling:\n    top_p: 0", "m.yaml:10: request.sampling.top_p: top_p 0: must be in (0, 1]"},
		{"request:\n  extra_body:\n    max_tokens: 3", `m.yaml:10: request.extra_body: extra body field "max_tokens": mbench writes it`},
		{"request: {api_key_env: 'not a name'}", "request.api_key_env"},
		{"request: {ignore_eos: maybe}", "request.ignore_eos"},
		{"request: {nope: 1}", "request.nope"},
		{"arrival: {process: concurrency, in_flight: 2, max_in_flight: 2}", "arrival.max_in_flight"},
	} {
		y := base + c.yaml + "\n"
		if strings.Contains(c.yaml, "in_flight: 2") {
			y = strings.Replace(base, "rates: [1]\n", "", 1) + c.yaml + "\n"
		}
		if _, err := Parse("m.yaml", []byte(y)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
}

// TestMeasurePercentiles: measure.percentiles are sorted distinct numbers
// in (0, 100); they shape the analysis, not the load, so they enter the
// matrix hash but not the cell ids; others are refused at their line.
func TestMeasurePercentiles(t *testing.T) {
	const base = "name: t\nseed: 1\nengine: {kind: sim}\nconfigs: {plain: {}}\nrates: [1]\nshapes: [{input: 16, output: 4}]\n"
	plain, _ := Parse("m.yaml", []byte(base+"measure: {min_completed: 10}\n"))
	m, err := Parse("m.yaml", []byte(base+"measure: {min_completed: 10, percentiles: [99.9, 75]}\n"))
	if err != nil || len(m.Measure.Percentiles) != 2 || m.Measure.Percentiles[0] != 75 || m.Measure.Percentiles[1] != 99.9 {
		t.Fatalf("percentiles: %v, %v", m, err)
	}
	if m.Cells()[0].ID != plain.Cells()[0].ID || m.Hash == plain.Hash {
		t.Error("percentiles changed the cell id, or not the matrix hash")
	}
	for _, bad := range []string{"[100]", "[95, 95]", "[0]", "[x]", "5"} {
		if _, err := Parse("m.yaml", []byte(base+"measure: {min_completed: 10, percentiles: "+bad+"}\n")); err == nil || !strings.Contains(err.Error(), "m.yaml:7: measure.percentiles") {
			t.Errorf("percentiles %s: %v, want an error at m.yaml:7", bad, err)
		}
	}
}
