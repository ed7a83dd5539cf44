package openloop

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// phaseLog records Config.OnPhase calls with their wall-clock times.
type phaseLog struct {
	mu     sync.Mutex
	phases []string
	at     []time.Time
}

func (l *phaseLog) hook(p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.phases = append(l.phases, p)
	l.at = append(l.at, time.Now())
}

// TestOnPhase: the hook fires once per phase, after every fill request has
// finished and before any open-loop request is sent (warmup), and before the
// first measured request is sent (measure) — open loop and trace replay.
func TestOnPhase(t *testing.T) {
	s := startStub(t, stub.Options{Tokens: 2, FirstToken: time.Millisecond})
	for _, tc := range []struct {
		name  string
		shape Shape
	}{
		{"open", Shape{Input: 32, Output: 2, CacheFill: &CacheFill{Prefixes: 5, PrefixTokens: 48}}},
		{"trace", Shape{Trace: &Trace{Path: syntheticTrace, TimeScale: 400, RequestLimit: 30}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l phaseLog
			res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "m", Rate: 100,
				Shape: tc.shape, Warmup: 6, Requests: 8, OnPhase: l.hook})
			if err != nil {
				t.Fatal(err)
			}
			if len(l.phases) != 2 || l.phases[0] != PhaseWarmup || l.phases[1] != PhaseMeasure {
				t.Fatalf("OnPhase calls %v, want [warmup measure]", l.phases)
			}
			warmAt, measAt := l.at[0].Sub(res.Start).Nanoseconds(), l.at[1].Sub(res.Start).Nanoseconds()
			measured := 0
			for _, r := range res.Records {
				switch {
				case r.Phase == PhaseFill && r.DoneNs > warmAt:
					t.Errorf("fill request %d finished at %d, after the warmup hook (%d)", r.ID, r.DoneNs, warmAt)
				case r.Phase != PhaseFill && r.SentNs < warmAt:
					t.Errorf("%s request %d sent at %d, before the warmup hook (%d)", r.Phase, r.ID, r.SentNs, warmAt)
				case r.Phase == PhaseMeasure && r.SentNs < measAt:
					t.Errorf("measured request %d sent at %d, before the measure hook (%d)", r.ID, r.SentNs, measAt)
				}
				if r.Phase == PhaseMeasure {
					measured++
				}
			}
			if measured != 8 {
				t.Errorf("%d measured requests, want 8", measured)
			}
		})
	}
}
