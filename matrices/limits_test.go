package matrices

import (
	"fmt"
	"strings"
	"testing"
)

// sizedMatrix is a matrix of n configs × n rates × n shapes, with extra
// appended.
func sizedMatrix(n int, extra string) string {
	var b strings.Builder
	b.WriteString("name: big\nseed: 1\nengine: {kind: sim}\nconfigs:\n")
	for i := range n {
		fmt.Fprintf(&b, "  c%d: {}\n", i)
	}
	b.WriteString("rates: [")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, i+1)
	}
	b.WriteString("]\nshapes:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {name: s%d, input: %d, output: 2}\n", i, i+8)
	}
	b.WriteString("measure: {min_completed: 100}\n" + extra)
	return b.String()
}

// TestSweepSizeBounded: a 27M-cell matrix is refused from its counts alone
// (no cell is expanded: the allocations stay small); a sweep over the runs
// or duration limit is refused with its figures; the limits section lets
// either through, and does not change the hash.
func TestSweepSizeBounded(t *testing.T) {
	var err error
	if n := allocated(func() { _, err = Parse("big.yaml", []byte(sizedMatrix(300, ""))) }); n > 50<<20 {
		t.Errorf("refusing 27M cells allocated %d bytes", n)
	}
	if err == nil || !strings.Contains(err.Error(), "the sweep has 27000000 cells (300 configs × 300 rates × 300 shapes), more than the limit of 10000") {
		t.Errorf("27M cells: %v", err)
	}
	_, err = Parse("r.yaml", []byte(sizedMatrix(20, "repeat: {min: 3, max: 20}\n")))
	if err == nil || !strings.Contains(err.Error(), "up to 160000 runs (8000 cells × repeat.max 20), more than the limit of 100000") {
		t.Errorf("runs: %v", err)
	}
	_, err = Parse("d.yaml", []byte(sizedMatrix(20, "limits: {duration: 100h}\n")))
	if err == nil || !strings.Contains(err.Error(), "8000 cells × 3 blocks (repeat.min) are estimated at 5d3h, more than the limit of 4d4h") {
		t.Errorf("duration: %v", err)
	}
	ok := mustParse(t, "ok.yaml", sizedMatrix(3, ""))
	raised := mustParse(t, "ok.yaml", sizedMatrix(3, "limits: {cells: 27, runs: 81, duration: 2h}\n"))
	if ok.Hash != raised.Hash || raised.Limits.Cells != 27 || ok.Limits != DefaultLimits {
		t.Errorf("limits: hash %s vs %s, %+v %+v", ok.Hash, raised.Hash, ok.Limits, raised.Limits)
	}
	if _, err := Parse("x.yaml", []byte(sizedMatrix(3, "limits: {cells: 26}\n"))); err == nil || !strings.Contains(err.Error(), "27 cells") {
		t.Errorf("a lowered limit: %v", err)
	}
	var desc strings.Builder
	big := mustParse(t, "b.yaml", sizedMatrix(5, ""))
	if err := big.Describe(&desc); err != nil || !strings.HasPrefix(strings.SplitN(desc.String(), "\n", 4)[2], "125 cells (5 configs × 5 rates × 5 shapes) × 3 blocks (min) ≈ ") {
		t.Errorf("Describe does not state the size first: %v\n%.300s", err, desc.String())
	}
}
