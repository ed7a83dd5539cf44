package results

import "testing"

// TestSpreadForGradedOutLastRun: a pair whose run in the sweep's last block
// was graded out (it ran, it is not a result) takes its spread from every
// block, as the stopping rule judged a sweep that ran out of blocks; only a
// pair that stopped running (only_unconverged) or a sweep the rule ended
// takes it from the second stage.
func TestSpreadForGradedOutLastRun(t *testing.T) {
	cell := func(id string, statuses ...Verdict) *Cell {
		c := &Cell{Info: CellInfo{ID: id}}
		for i, st := range statuses {
			c.Runs = append(c.Runs, &Run{Ref: RunRef{Cell: id, Block: i + 1, Status: st}})
		}
		return c
	}
	s := &Sweep{Stage1: 2, Blocks: 6}
	ok, cl := VerdictOK, VerdictClientLimited
	graded := lastTogether(cell("t", ok, ok, ok, ok, ok, cl), cell("b", ok, ok, ok, ok, ok, ok))
	if sp := spreadFor(s, graded); sp != (Spread{}) {
		t.Errorf("last run graded out: spread %+v, want every block", sp)
	}
	stopped := lastTogether(cell("t", ok, ok, ok, ok), cell("b", ok, ok, ok, ok, ok, ok))
	if sp := spreadFor(s, stopped); sp.Method != MethodSecondStage || sp.Stage1 != 2 {
		t.Errorf("pair stopped after block 4: spread %+v, want the second stage", sp)
	}
	if sp := spreadFor(&Sweep{Stage1: 2, Blocks: 6, RuleStop: true}, graded); sp.Method != MethodSecondStage {
		t.Errorf("sweep the rule ended: spread %+v, want the second stage", sp)
	}
}
