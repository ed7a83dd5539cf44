package matrices

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mbench/mbench/openloop"
)

// TestShapesDecode checks every shape kind against its expected struct.
func TestShapesDecode(t *testing.T) {
	m := mustLoad(t, "testdata/shapes.yaml")
	trace := filepath.Join("testdata", "traces", "tiny.jsonl")
	want := []openloop.Shape{
		{Name: "4096x256", Input: 4096, Output: 256},
		{Name: "lens", InputDist: &openloop.Dist{Kind: "lognormal", Median: 2000, P90: 8000}, OutputDist: &openloop.Dist{Kind: "uniform", Min: 32, Max: 256}},
		{Name: "shared", Input: 4096, Output: 64, Prefix: &openloop.Prefix{NumPrefixes: 8, PrefixTokens: 3072}},
		{Name: "fill", Input: 1024, Output: 16, CacheFill: &openloop.CacheFill{Prefixes: 200, PrefixTokens: 1024}},
		{Name: "agentic", Trace: &openloop.Trace{Path: trace, TimeScale: 20, RequestLimit: 200, MaxInflightSessions: 8}},
		{Name: "tiny", Trace: &openloop.Trace{Path: trace, TimeScale: 1}},
	}
	if !reflect.DeepEqual(m.Shapes, want) {
		for i := range want {
			if i < len(m.Shapes) && !reflect.DeepEqual(m.Shapes[i], want[i]) {
				t.Errorf("shape %d\n got %+v\nwant %+v", i, m.Shapes[i], want[i])
			}
		}
		t.Fatalf("got %d shapes", len(m.Shapes))
	}
	for _, name := range []string{"agentic", "tiny"} {
		if m.written[name] != "traces/tiny.jsonl" {
			t.Errorf("shape %s: trace path as written %q", name, m.written[name])
		}
	}
	if m.Arrival != (openloop.Arrival{Process: "gamma", Burstiness: 0.5}) {
		t.Errorf("arrival %+v", m.Arrival)
	}
	if len(m.Cells()) != 12 {
		t.Errorf("%d cells, want 2 rates × 6 shapes", len(m.Cells()))
	}
}

// TestTraceIDsIndependentOfLocation: the same matrix read through another
// path gives the same cell ids and hash (trace paths hash as written).
func TestTraceIDsIndependentOfLocation(t *testing.T) {
	a := mustLoad(t, "testdata/shapes.yaml")
	abs, _ := filepath.Abs("testdata/shapes.yaml")
	b := mustLoad(t, abs)
	if a.Hash != b.Hash {
		t.Errorf("hash %s vs %s", a.Hash, b.Hash)
	}
	ca, cb := a.Cells(), b.Cells()
	for i := range ca {
		if ca[i].ID != cb[i].ID {
			t.Errorf("cell %d: %s vs %s", i, ca[i].ID, cb[i].ID)
		}
	}
	if !filepath.IsAbs(b.Shapes[4].Trace.Path) || !strings.HasSuffix(b.Shapes[4].Trace.Path, "testdata/traces/tiny.jsonl") {
		t.Errorf("trace path %q not resolved against the matrix file", b.Shapes[4].Trace.Path)
	}
	if _, err := Parse("elsewhere/shapes.yaml", []byte("name: x\nseed: 1\nengine: {kind: sim}\nconfigs: {p: {}}\nrates: [1]\nshapes: [{trace: {path: t.jsonl}}]\nmeasure: {min_completed: 1}\n")); err != nil {
		t.Errorf("Parse must not touch the file system: %v", err)
	}
}
