package router

import (
	"net/http"
	"testing"
)

// TestBreakdownCounts: /breakdown counts as offloaded only elastic offloads
// (a PD split is its own count), and averages the time to first byte over
// served requests only — a failed request's 0 does not pull the mean down.
func TestBreakdownCounts(t *testing.T) {
	r, err := New([]string{"http://c0", "http://c1"}, []string{"http://p0"}, Options{Policy: Sticky})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLog(nil)
	for _, e := range []Entry{
		{Class: Heavy, Instance: 0, PrefillInstance: 2, Split: "pd", Status: http.StatusOK, FirstByteMs: 100},
		{Class: Heavy, Instance: 1, PrefillInstance: 2, Split: "pd", Status: http.StatusOK, FirstByteMs: 300},
		{Class: Heavy, Instance: 1, PrefillInstance: 2, Split: "pd", Status: http.StatusBadGateway},
		{Class: Heavy, Instance: 0, PrefillInstance: 1, Split: "offload", Status: http.StatusOK, FirstByteMs: 500},
		{Class: Warm, Instance: 0, PrefillInstance: 0, Status: http.StatusGatewayTimeout, FirstByteMs: 0},
	} {
		l.finish(&e)
	}
	b := l.Breakdown(r)
	h := b.Classes[Heavy]
	if b.Requests != 5 || b.Failed != 2 || b.Offloaded != 1 || b.PDSplit != 3 {
		t.Errorf("totals: %+v", b)
	}
	if h.Requests != 4 || h.Failed != 1 || h.Offloaded != 1 || h.PDSplit != 3 || h.MeanFirstMs != 300 {
		t.Errorf("HEAVY: %+v, want 4 requests, 1 failed, 1 offloaded, 3 PD, mean first byte (100+300+500)/3 = 300", h)
	}
	if w := b.Classes[Warm]; w.Requests != 1 || w.Failed != 1 || w.MeanFirstMs != 0 {
		t.Errorf("WARM (only a failure): %+v", w)
	}
	if b.Instances[2].PrefillsIn != 3 || b.Instances[1].PrefillsIn != 1 {
		t.Errorf("prefills run for another instance: %+v", b.Instances)
	}
}
