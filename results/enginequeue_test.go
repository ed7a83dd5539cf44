package results

import (
	"github.com/mbench/mbench/probes"
	"math"
	"strings"
	"testing"
)

// TestSaturationFromEngineQueue: where the engine exports its queue
// (vllm:num_requests_waiting, llamacpp:requests_deferred) and the window's
// scrapes read it, a TTFT that rises through the window is saturation only
// if requests waited in that queue; with the queue empty throughout it is
// the engine slowing down, reported as a drift with its size, and the run
// stays a result. Where the engine says nothing (no queue series, or too
// few scrapes to speak for the window) TTFT's trend decides as before.
func TestSaturationFromEngineQueue(t *testing.T) {
	rising := func() RunInput {
		return poissonRun(2, 300, 10, func(ts float64) float64 { return 100 + 50*ts + 20*math.Sin(ts*7) }, false)
	}
	for _, c := range []struct {
		name      string
		cache     *CacheSummary
		saturated bool
		because   string
		drift     bool
	}{
		{"queue empty", &CacheSummary{WaitingExported: true, DuringRounds: 30}, false, "", true},
		{"queue held requests", &CacheSummary{WaitingExported: true, DuringRounds: 30, Waiting: probes.Level{Mean: 1.5, Max: 4}}, true, "the engine's queue held up to 4 requests waiting", false},
		{"no queue series", &CacheSummary{DuringRounds: 30}, true, "TTFT rises", false},
		{"too few scrapes", &CacheSummary{WaitingExported: true, DuringRounds: EngineQueueMinRounds - 1}, true, "TTFT rises", false},
		{"no metrics", nil, true, "TTFT rises", false},
	} {
		in := rising()
		in.Cache = c.cache
		s, err := SummarizeRun(in)
		if err != nil {
			t.Fatal(err)
		}
		if s.Saturated != c.saturated || !strings.Contains(s.SaturationReason, c.because) || (s.TTFTDriftMs != nil) != c.drift {
			t.Errorf("%s: saturated %v (%q), drift %v (%q); want saturated %v containing %q, drift %v",
				c.name, s.Saturated, s.SaturationReason, deref(s.TTFTDriftMs), s.DriftReason, c.saturated, c.because, c.drift)
		}
		if c.drift && (s.Verdict != VerdictOK || *s.TTFTDriftMs < 1000 || !strings.Contains(s.DriftReason, "queue stayed empty in all 30 scrapes")) {
			t.Errorf("%s: verdict %s, drift %v ms (%q); want ok and the rise of about 1.5 s", c.name, s.Verdict, *s.TTFTDriftMs, s.DriftReason)
		}
	}
	// A steady TTFT has no drift, whatever the queue says.
	in := poissonRun(1, 300, 10, func(float64) float64 { return 300 }, false)
	in.Cache = &CacheSummary{WaitingExported: true, DuringRounds: 30}
	if s, _ := SummarizeRun(in); s.Saturated || s.TTFTDriftMs != nil {
		t.Errorf("steady: saturated %v drift %v", s.Saturated, deref(s.TTFTDriftMs))
	}
}
