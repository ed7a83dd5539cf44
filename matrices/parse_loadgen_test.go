package matrices

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop"
)

// TestLoadgenOptionsUnusedKeepHashes: a matrix that does not use the load
// generator's issue-22 options, or sets them to their defaults, keeps its
// hash and cell ids.
func TestLoadgenOptionsUnusedKeepHashes(t *testing.T) {
	plain := mustParse(t, "x.yaml", minimalSim)
	explicit := mustParse(t, "x.yaml", minimalSim+"endpoint: completions\n")
	chat := mustParse(t, "x.yaml", minimalSim+"endpoint: chat\n")
	ramp := mustParse(t, "x.yaml", minimalSim+"arrival: {ramp: {kind: linear, from: 0.5, duration: 20s}}\n")
	if r := ramp.Arrival.Ramp; r == nil || r.Kind != openloop.RampLinear || r.From != 0.5 || r.Duration != 20*time.Second || ramp.Hash == plain.Hash {
		t.Errorf("ramp %+v, hash changed %t", r, ramp.Hash != plain.Hash)
	}
	if plain.Hash != explicit.Hash || plain.Cells()[0].ID != explicit.Cells()[0].ID {
		t.Errorf("endpoint: completions changed the hash")
	}
	if plain.Hash == chat.Hash || plain.Cells()[0].ID == chat.Cells()[0].ID {
		t.Errorf("endpoint: chat kept the hash")
	}
	if plain.Endpoint != openloop.EndpointCompletions || chat.Endpoint != openloop.EndpointChat {
		t.Errorf("endpoints %q %q", plain.Endpoint, chat.Endpoint)
	}
}

// TestLoadgenOptionErrors: each bad option is refused with its line and
// field.
func TestLoadgenOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		extra, want string
		dropRates   bool // remove rates: [1] (line 5; later lines move up one)
	}{
		{"endpoint: chats\n", `x.yaml:8: endpoint: unknown value "chats"`, false},
		{"arrival: {process: concurrency}\n", "x.yaml:7: arrival.in_flight: missing required key (process concurrency)", true},
		{"arrival: {process: concurrency}\n", "x.yaml:5: rates: a closed loop (process concurrency) has no rate", false},
		{"arrival: {process: concurrency, in_flight: 4}\n", "x.yaml:8: arrival.in_flight: a closed loop's in-flight levels replace rates (rates at line 5)", false},
		{"arrival: {in_flight: 4}\n", "x.yaml:7: arrival.in_flight: in_flight applies to process concurrency only", true},
		{"arrival: {process: concurrency, in_flight: [2, 2]}\n", "level 2 is listed twice", true},
		{"arrival: {process: concurrency, in_flight: 0}\n", "x.yaml:7: arrival.in_flight", true},
		{"arrival: {ramp: {kind: linear, from: 1}}\n", "x.yaml:8: arrival.ramp.duration: missing required key", false},
		{"arrival: {ramp: {kind: steps, from: 1, duration: 5s}}\n", `x.yaml:8: arrival.ramp.kind: unknown value "steps"`, false},
		{"arrival: {ramp: {kind: exponential, from: 0, duration: 5s}}\n", "x.yaml:8: arrival.ramp.from: an exponential ramp starts at a rate > 0", false},
		{"arrival: {process: concurrency, in_flight: 2, ramp: {kind: linear, from: 0, duration: 5s}}\n", "x.yaml:7: arrival.ramp: a closed loop has no rate to ramp", true},
		{"arrival: {process: concurrency, in_flight: 2}\ncapacity: {metric: ttft_p90, max_ms: 100, lo: 1, hi: 8}\n", "x.yaml:7: arrival.process: a capacity search over rates needs an open loop", true},
		{"arrival: {process: constant}\n", "", false}, // (a valid extra, so the loop's Parse must succeed)
	} {
		src := minimalSim + tc.extra
		if tc.dropRates {
			src = strings.Replace(src, "rates: [1]\n", "", 1)
		}
		_, err := Parse("x.yaml", []byte(src))
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.extra, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.extra, err, tc.want)
		}
	}
}

// TestArrivalRulesAtTheirLines: the load generator's own arrival rules
// (openloop.Arrival.Validate, CheckShape) broken by a matrix are placed at
// the line and field their paths name, with the shape that breaks them.
func TestArrivalRulesAtTheirLines(t *testing.T) {
	trace := strings.Replace(minimalSim, "shapes: [{input: 8, output: 2}]", "shapes: [{name: tr, trace: {path: t.jsonl}}]", 1)
	noRates := strings.Replace(trace, "rates: [1]\n", "", 1)
	for _, tc := range []struct{ src, want string }{
		{strings.Replace(minimalSim, "rates: [1]\n", "", 1) + "arrival: {process: concurrency, in_flight: 2,\n  max_in_flight: 4}\n",
			"x.yaml:8: arrival.max_in_flight: a closed loop keeps in_flight requests in flight; it takes no cap; valid: a rate process (poisson, gamma, constant), or remove max_in_flight"},
		{strings.Replace(minimalSim, "rates: [1]\n", "", 1) + "arrival: {process: concurrency, in_flight: 2, max_in_flight: 4,\n  ramp: {kind: linear, from: 0, duration: 5s}}\n",
			"x.yaml:7: arrival.max_in_flight: a closed loop keeps in_flight requests in flight; it takes no cap; valid: a rate process (poisson, gamma, constant), or remove max_in_flight\n" +
				"x.yaml:8: arrival.ramp: a closed loop has no rate to ramp; valid: a rate process (poisson, gamma, constant)"},
		{trace + "arrival: {ramp: {kind: linear, from: 0, duration: 5s}}\n",
			"x.yaml:8: arrival.ramp: shape tr: a trace replays its own send times: no rate to ramp; valid: shapes without trace"},
		{noRates + "arrival:\n  process: concurrency\n  in_flight: 2\n",
			"x.yaml:9: arrival.in_flight: shape tr: a trace replays its own send times; bound it with max_inflight_sessions instead of a closed loop; valid: poisson, gamma or constant with a trace shape"},
	} {
		_, err := Parse("x.yaml", []byte(tc.src))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
}

// TestShapesHeldToTheLoadGenerator: a shape whose keys are each within
// bounds but that the load generator refuses (a lognormal whose p90 is its
// median, a prompt longer than it sends) is refused by Parse at the line
// and field of the key its rule names, not when its run starts; every
// rule it breaks at once, and none over a value the decoder refused.
func TestShapesHeldToTheLoadGenerator(t *testing.T) {
	for _, tc := range []struct{ shape, want string }{
		{"{name: l, input_dist: {kind: lognormal, median: 100, p90: 100}, output: 4}", "x.yaml:6: shapes[0].input_dist.p90: must be > median 100, got 100"},
		{"{input: 5000000, output: 4}", "x.yaml:6: shapes[0].input: must be in [1, 4194304] tokens, got 5000000"},
		{"{name: l, output: 4,\n  input_dist: {kind: lognormal,\n    median: 100,\n    p90: 100}}", "x.yaml:9: shapes[0].input_dist.p90: must be > median 100, got 100"},
		{"{input: 8,\n  output: 5000000}", "x.yaml:7: shapes[0].output: must be in [1, 4194304] tokens, got 5000000"},
		{"{input: 10, output: 4,\n  prefix: {num_prefixes: 2,\n    prefix_tokens: 30}}", "x.yaml:8: shapes[0].prefix.prefix_tokens: 30 exceeds input 10 (input is the whole prompt)"},
		{"{name: l, output: 4, input_dist: {kind: lognormal, median: 100, p90: 50, min: 9, max: 3}}",
			"x.yaml:6: shapes[0].input_dist.max: max 3 is below min 9\nx.yaml:6: shapes[0].input_dist.p90: must be > median 100, got 50"},
		{"{name: l, output: x, input_dist: {kind: uniform, min: 9, max: 3}}", "x.yaml:6: shapes[0].input_dist.max: need 1 ≤ min ≤ max, got min 9 max 3\n" +
			`x.yaml:6: shapes[0].output: expected an integer, got string "x"; valid: an integer from 1 to 10000000`},
		{"{input: x, output: 4, prefix: {num_prefixes: 2, prefix_tokens: 3}}", `x.yaml:6: shapes[0].input: expected an integer, got string "x"; valid: an integer from 1 to 10000000`},
		{"{name: l, output: 4, input_dist: {kind: uniform, min: 9}}", "x.yaml:6: shapes[0].input_dist.max: missing required key (kind uniform); valid: an integer ≥ 1"},
	} {
		src := strings.Replace(minimalSim, "shapes: [{input: 8, output: 2}]", "shapes: ["+tc.shape+"]", 1)
		if _, err := Parse("x.yaml", []byte(src)); err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %s", tc.shape, err, tc.want)
		}
	}
}

// TestClosedLoopLevels: in_flight levels become the cells' rates, one cell
// per level and config; a matrix without rates or in_flight is refused.
func TestClosedLoopLevels(t *testing.T) {
	noRates := strings.Replace(minimalSim, "rates: [1]\n", "", 1)
	m := mustParse(t, "x.yaml", noRates+"arrival: {process: concurrency, in_flight: [2, 8]}\n")
	if len(m.Rates) != 2 || m.Rates[0] != 2 || m.Rates[1] != 8 || len(m.Cells()) != 4 || m.Arrival.Process != openloop.ArrivalConcurrency {
		t.Errorf("rates %v, %d cells, arrival %+v", m.Rates, len(m.Cells()), m.Arrival)
	}
	one := mustParse(t, "x.yaml", noRates+"arrival: {process: concurrency, in_flight: 3}\n")
	if len(one.Rates) != 1 || one.Rates[0] != 3 {
		t.Errorf("rates %v", one.Rates)
	}
	if _, err := Parse("x.yaml", []byte(noRates)); err == nil || !strings.Contains(err.Error(), "rates: missing required key") {
		t.Errorf("no rates: %v", err)
	}
}

// TestDatasetShapes: a dataset shape decodes with its path resolved against
// the matrix file and its name from the file; Load checks the file with the
// load generator's parser, so a prompt without an output length (and no
// output on the shape) is refused with the file's line; the other shape
// keys cannot go beside it.
func TestDatasetShapes(t *testing.T) {
	dir := t.TempDir()
	write := func(shapes string) string {
		p := filepath.Join(dir, "m.yaml")
		src := strings.Replace(minimalSim, "shapes: [{input: 8, output: 2}]\n", "shapes:\n"+shapes, 1)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	abs, _ := filepath.Abs("testdata/datasets")
	m, err := Load(write("  - {dataset: {path: " + abs + "/chat.json, format: sharegpt}}\n  - {name: fixed, output: 9, dataset: {path: " + abs + "/partial.jsonl, format: jsonl}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Shapes[0]; s.Name != "chat" || s.Dataset.Format != openloop.DatasetShareGPT || s.Dataset.Path != abs+"/chat.json" || s.Output != 0 {
		t.Errorf("shape 0 %+v %+v", s, s.Dataset)
	}
	if s := m.Shapes[1]; s.Name != "fixed" || s.Output != 9 || s.Dataset.Format != openloop.DatasetJSONL {
		t.Errorf("shape 1 %+v", s)
	}
	for _, tc := range []struct{ shapes, want string }{
		{"  - {dataset: {path: " + abs + "/partial.jsonl, format: jsonl}}\n", "partial.jsonl:2: no output length"},
		{"  - {dataset: {path: " + abs + "/chat.json, format: jsonl}}\n", "chat.json:1: invalid JSON"},
		{"  - {dataset: {path: nothere.json, format: sharegpt}}\n", "cannot read dataset"},
		{"  - {input: 5, dataset: {path: " + abs + "/chat.json, format: sharegpt}}\n", "m.yaml:7: shapes[0].input: cannot be combined with dataset"},
		{"  - {dataset: {path: x.json, format: csv}}\n", `shapes[0].dataset.format: unknown value "csv"`},
		{"  - {dataset: {format: jsonl}}\n", "shapes[0].dataset.path: missing required key"},
	} {
		_, err := Load(write(tc.shapes))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.shapes, err, tc.want)
		}
	}
}

func TestIncludeRampNeedsRamp(t *testing.T) {
	src := strings.Replace(minimalSim, "measure: {min_completed: 3}", "measure: {min_completed: 3, include_ramp: true}", 1)
	if _, err := Parse("x.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "x.yaml:7: measure.include_ramp: there is no ramp to include") {
		t.Errorf("include_ramp without a ramp: %v", err)
	}
	m := mustParse(t, "x.yaml", src+"arrival: {ramp: {kind: exponential, from: 1, duration: 1m}}\n")
	if !m.Measure.IncludeRamp {
		t.Error("include_ramp not set")
	}
}
