package openloop

import (
	"runtime"
	"testing"
)

// TestSelfGradeUnreachable: requests the server refused or dropped before
// they could be written (an engine killed mid-run) are the server's
// failures, not sends the generator missed: a run where every request
// after the engine died was refused is not client-limited, while the same
// run with those requests simply never sent (the generator stalled) is.
func TestSelfGradeUnreachable(t *testing.T) {
	mk := func(class ErrorClass) []Record {
		var recs []Record
		for i := range 100 {
			sched := int64(i) * 10e6 // 100 req/s, on time
			r := Record{ID: i, Phase: PhaseMeasure, ScheduledNs: sched, Status: StatusOK}
			if i < 40 {
				r.SentNs, r.HeadNs, r.DoneNs = sched+1e5, sched+2e5, sched+5e6
			} else {
				r.Status, r.ErrorClass = StatusError, class
			}
			recs = append(recs, r)
		}
		return recs
	}
	a := Arrival{Process: ArrivalConstant}
	for _, class := range []ErrorClass{ErrClassConnRefused, ErrClassConnReset} {
		if g := SelfGrade(mk(class), 100, a); g.ClientLimited || g.Unreachable != 60 || g.Sent != 40 {
			t.Errorf("%s: client_limited %v (%s), unreachable %d, sent %d; want false, 60, 40", class, g.ClientLimited, g.Reason, g.Unreachable, g.Sent)
		}
	}
	if g := SelfGrade(mk(ErrClassCanceled), 100, a); !g.ClientLimited || g.Unreachable != 0 {
		t.Errorf("never sent, canceled: client_limited %v, unreachable %d; want true, 0", g.ClientLimited, g.Unreachable)
	}
}

// TestHostShare: the machine's busy and stolen CPU over a run, as a share
// of all its cores; unknown when either reading is.
func TestHostShare(t *testing.T) {
	a := hostTimes{busy: 100, steal: 5, cores: 4, ok: true}
	b := hostTimes{busy: 106, steal: 5.4, cores: 4, ok: true}
	busy, steal, ok := hostShare(a, b, 2) // 8 core-seconds
	if !ok || busy != 75 || steal < 4.99 || steal > 5.01 {
		t.Errorf("busy %v%% steal %v%% ok %v; want 75, 5, true", busy, steal, ok)
	}
	if _, _, ok := hostShare(hostTimes{}, b, 2); ok {
		t.Error("an unknown first reading gave a share")
	}
	if h := readHostTimes(); runtime.GOOS == "linux" && (!h.ok || h.cores < 1 || h.busy <= 0) {
		t.Errorf("this Linux machine's CPU times: %+v", h)
	}
}
