package matrices

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

const capacityBase = "name: x\nseed: 1\nengine: {kind: sim}\nconfigs: {a: {}, b: }\nshapes: [{input: 8, output: 2}]\nmeasure: {min_completed: 3}\n"

func TestCapacityParse(t *testing.T) {
	m := mustParse(t, "x.yaml", capacityBase+"capacity: {metric: ttft_p90, max_ms: 500, lo: 1, hi: 64}\n")
	want := Capacity{Metric: "ttft_p90", MaxMs: 500, Lo: 1, Hi: 64, Tolerance: DefaultCapacityTolerance,
		Blocks: DefaultCapacityBlocks, MaxProbes: DefaultCapacityMaxProbes, Expand: DefaultCapacityExpand, Retries: DefaultCapacityRetries}
	if m.Capacity == nil || !reflect.DeepEqual(*m.Capacity, want) {
		t.Fatalf("capacity %+v, want %+v", m.Capacity, want)
	}
	if len(m.Cells()) != 0 || len(m.Rates) != 0 {
		t.Errorf("a capacity search has cells %v before it probes", m.Cells())
	}
	c, err := m.CapacityCell("b", 12.5, m.Shapes[0], 0)
	if err != nil || c.Rate != 12.5 || c.Config != "b" || c.ID == "" {
		t.Fatalf("CapacityCell: %+v, %v", c, err)
	}
	c2, _ := m.CapacityCell("b", 12.5, m.Shapes[0], 0)
	c3, _ := m.CapacityCell("b", 13, m.Shapes[0], 0)
	r1, _ := m.CapacityCell("b", 12.5, m.Shapes[0], 1)
	if c2.ID != c.ID || c3.ID == c.ID || r1.ID == c.ID || r1.Rate != c.Rate || r1.Attempt != 1 {
		t.Errorf("cell ids: same rate %s/%s, other rate %s, a re-run %s (attempt %d)", c.ID, c2.ID, c3.ID, r1.ID, r1.Attempt)
	}
	if _, err := m.CapacityCell("nope", 1, m.Shapes[0], 0); err == nil {
		t.Error("unknown config accepted")
	}
	// The capacity section is part of the hash: another limit is another sweep.
	m2 := mustParse(t, "x.yaml", capacityBase+"capacity: {metric: ttft_p90, max_ms: 400, lo: 1, hi: 64}\n")
	if m2.Hash == m.Hash {
		t.Error("the matrix hash ignores the capacity section")
	}
	// A fixed-rate matrix keeps its hash (no capacity key in its resolved form).
	fixed := mustParse(t, "x.yaml", minimalSim)
	if js, _ := fixed.Resolved(); strings.Contains(string(js), "capacity") {
		t.Error("a fixed-rate matrix's resolved form mentions capacity")
	}
}

func TestCapacityErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"rates and capacity", capacityBase + "rates: [1, 2]\ncapacity: {metric: ttft_p90, max_ms: 500, lo: 1, hi: 64}\n",
			"x.yaml:7: rates: a capacity search chooses its own rates"},
		{"neither", capacityBase, "x.yaml:1: rates: missing required key"},
		{"throughput metric", capacityBase + "capacity: {metric: output_throughput, max_ms: 500, lo: 1, hi: 64}\n",
			"x.yaml:7: capacity.metric: unknown value \"output_throughput\""},
		{"hi not above lo", capacityBase + "capacity: {metric: ttft_p90, max_ms: 500, lo: 8, hi: 8}\n",
			"x.yaml:7: capacity.hi: hi 8 is not above lo"},
		{"one block", capacityBase + "capacity: {metric: ttft_p90, max_ms: 500, lo: 1, hi: 8, blocks: 1}\n",
			"x.yaml:7: capacity.blocks: 1 is out of range"},
		{"missing limit", capacityBase + "capacity: {metric: ttft_p90, lo: 1, hi: 8}\n",
			"x.yaml:7: capacity.max_ms: missing required key"},
		{"tolerance above 1", capacityBase + "capacity: {metric: ttft_p90, max_ms: 5, lo: 1, hi: 8, tolerance: 2}\n",
			"x.yaml:7: capacity.tolerance: 2 is out of range"},
		{"repeat blocks", capacityBase + "repeat: {min: 4}\ncapacity: {metric: ttft_p90, max_ms: 5, lo: 1, hi: 8}\n",
			"x.yaml:7: repeat.min: does not apply to a capacity search"},
		{"unknown key", capacityBase + "capacity: {metric: ttft_p90, max_ms: 5, lo: 1, hi: 8, limit: 3}\n",
			"x.yaml:7: capacity.limit: unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(tc.yaml))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error %v is not Errors", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error:\n%v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// FuzzParseCapacity: any capacity section either parses into a search
// whose bounds make sense or is refused with file:line errors; never a
// panic.
func FuzzParseCapacity(f *testing.F) {
	for _, s := range []string{"{metric: ttft_p90, max_ms: 500, lo: 1, hi: 64}", "{metric: e2el_p99, max_ms: 1e9, lo: 0.001, hi: 1e6, tolerance: 1, blocks: 2, max_probes: 2, expand: 0}",
		"[1, 2]", "{lo: -1}", "{metric: ttft_p90, max_ms: .nan, lo: 1, hi: 2}", "null"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, section string) {
		m, err := Parse("f.yaml", []byte(capacityBase+"capacity: "+section+"\n"))
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T %v is not a non-empty Errors", err, err)
			}
			return
		}
		c := m.Capacity
		if c == nil {
			t.Fatal("accepted without a capacity search or rates")
		}
		if !(c.Lo > 0 && c.Hi > c.Lo && c.MaxMs > 0 && c.Blocks >= 2 && c.Tolerance > 0 && c.Tolerance <= 1 && c.MaxProbes >= 2) {
			t.Fatalf("accepted a search that cannot run: %+v", c)
		}
		if _, err := m.Resolved(); err != nil {
			t.Fatalf("Resolved: %v", err)
		}
	})
}

// TestCapacitySpecRoundTrip: the resolved capacity section (spec, part of
// the matrix hash) reads back into Capacity through its json names, as a
// resumed or exported sweep reads it from sweep.json.
func TestCapacitySpecRoundTrip(t *testing.T) {
	want := Capacity{Metric: "ttft_p90", MaxMs: 250, Lo: 10, Hi: 40, Tolerance: 0.05, Blocks: 3, MaxProbes: 12, Expand: 4}
	b, err := json.Marshal(want.spec())
	if err != nil {
		t.Fatal(err)
	}
	var got Capacity
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s read back as %+v, want %+v", b, got, want)
	}
}
