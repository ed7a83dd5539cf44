package orchestrator

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/mbench/mbench/internal/longrun"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/stats"
)

// The method's validity claims, judged by the whole loop (orders, re-runs
// in place, journal, export) over many seeded sweeps of a scripted engine
// that slows as it works, as the simulated engine with drift_per_request
// does in cmd/mbench's TestValidityOrderingEffect. There the machine
// decides which runs the load generator grades client_limited (and so which
// are run again in place, or left out); here the test does, at a scripted
// rate, and the claims are asserted as rates over the seeds. The end-to-end
// sweeps check that the real pipeline feeds this method the values it
// assumes.

// validityWorld is the truth of the scripted sweeps.
type validityWorld struct {
	drift  float64 // relative slowdown per run measured before, attempts included
	runSD  float64 // log-scale noise of a run's value
	tax    float64 // relative cost of the taxed config
	busy   float64 // probability that an attempt is graded client_limited
	blocks int
}

// drifting scripts a sweep of w: the n-th attempt the engine measured
// (from 0, whatever its cell) is worth 10·(1+drift)^n ms, the taxed config
// tax more, times the run's noise; an attempt is graded client_limited
// with probability busy. Everything is drawn from seed.
func drifting(w validityWorld, seed int64) *scripted {
	rng := rand.New(rand.NewPCG(uint64(seed), 0xd21f7))
	n := 0
	return &scripted{script: func(r run) (float64, results.Verdict, error) {
		v := 10 * math.Pow(1+w.drift, float64(n)) * math.Exp(w.runSD*rng.NormFloat64())
		n++
		if r.cell.Config == "taxed" {
			v *= 1 + w.tax
		}
		if rng.Float64() < w.busy {
			return v, results.VerdictClientLimited, nil
		}
		return v, results.VerdictOK, nil
	}}
}

const validityMatrix = `name: validity
seed: %d
engine: {kind: sim, ready_timeout: 5s}
configs:
  plain: {}
  plain_aa: {same_as: plain}
  taxed: {sim: {connector: constant, connector_us: 1000}}
rates: [10]
shapes: [{name: s, input: 16, output: 4}]
measure: {min_completed: 10}
repeat: {min: %d, max: %d, metric: ttft_p90, rel_ci: 0.05, confidence: 0.95, randomize: %v}
gate: {enabled: false}
baseline: plain
compare: [ttft_p90]
`

// validityOutcome is one scripted sweep's A/A and tax comparisons on
// ttft_p90, as the export prints them, and its runs run again in place.
type validityOutcome struct {
	aa, tax results.ComparisonRow
	reruns  int
}

// validitySweep runs one scripted sweep of w with the given seed, cells in
// a fixed order or in the Williams orders (randomize).
func validitySweep(t *testing.T, w validityWorld, seed int64, randomize bool) validityOutcome {
	t.Helper()
	dir := t.TempDir()
	m := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(m, []byte(fmt.Sprintf(validityMatrix, seed, w.blocks, w.blocks, randomize)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	f := drifting(w, seed)
	if _, err := Run(context.Background(), m, loopOpts(out, f)); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	rep, err := exportSweep(context.Background(), out, ExportOverrides{}, true)
	if err != nil {
		t.Fatal(err)
	}
	o := validityOutcome{reruns: len(f.runs) - 3*w.blocks}
	for _, r := range rep.NoiseFloor {
		if r.Config == "plain_aa" && r.Metric == "ttft_p90" {
			o.aa = r
		}
	}
	for _, r := range rep.Comparisons {
		if r.Config == "taxed" && r.Metric == "ttft_p90" {
			o.tax = r
		}
	}
	return o
}

// TestValidityOverSeeds: on an engine that slows +5% a run, over 20
// seeds, with no run graded out and with a third of the attempts graded
// client_limited (run again in place, left out after two re-runs: a busy
// machine): the fixed order makes the A/A pair's spurious effect
// significant in at least 90% of sweeps; the Williams orders keep the A/A
// pair's false positives consistent with α (one-sided binomial p > 0.001),
// each of them a difference under aaBound; the +50% tax is found in every
// Williams sweep, its CI covering it consistently with 95%.
func TestValidityOverSeeds(t *testing.T) {
	if !longrun.On() {
		t.Skip("80 scripted sweeps, a minute of file writes: MBENCH_LONG=1 runs them (.ci/run does)")
	}
	const seeds = 20
	for _, busy := range []float64{0, 1.0 / 3} {
		w := validityWorld{drift: 0.05, runSD: 0.01, tax: 0.5, busy: busy, blocks: 6}
		t.Run(fmt.Sprintf("client_limited %.0f%%", 100*busy), func(t *testing.T) {
			longrun.Parallel(t)
			var fixedSig, aaFP, aaBig, taxFound, taxCover, reruns, n int
			for seed := int64(1); seed <= seeds; seed++ {
				fx := validitySweep(t, w, seed, false)
				wl := validitySweep(t, w, seed, true)
				n++
				reruns += fx.reruns + wl.reruns
				if fx.aa.Significant() && fx.aa.Effect > 0.03 {
					fixedSig++
				}
				if wl.aa.Significant() {
					aaFP++
					if math.Abs(wl.aa.Effect) >= aaBound {
						aaBig++
					}
				}
				if tx := wl.tax; tx.Significant() && tx.Effect > 0.4 && tx.Effect < 0.6 {
					taxFound++
					if tx.Lo <= w.tax && w.tax <= tx.Hi {
						taxCover++
					}
				} else {
					t.Logf("seed %d, Williams orders: taxed %s over %d blocks", seed, tx.Text(), tx.N)
				}
			}
			t.Logf("%d seeds, %.1f re-runs a sweep: fixed order A/A significant (> +3%%) %d; Williams A/A significant %d (%d beyond ±%.0f%%); tax found %d of %d, its CI covers it %d",
				n, float64(reruns)/float64(2*n), fixedSig, aaFP, aaBig, 100*aaBound, taxFound, n, taxCover)
			if fixedSig < n*9/10 {
				t.Errorf("fixed order: the A/A pair's spurious effect significant in %d of %d sweeps; want ≥ 90%%", fixedSig, n)
			}
			if p := stats.BinomialTail(aaFP, n, 0.05); p < 0.001 {
				t.Errorf("Williams orders: %d A/A false positives in %d sweeps, above α = 5%% (binomial p = %.2g)", aaFP, n, p)
			}
			if aaBig > 0 {
				t.Errorf("Williams orders: %d of %d sweeps show an A/A difference beyond ±%.0f%%", aaBig, n, 100*aaBound)
			}
			if taxFound < n {
				t.Errorf("Williams orders: the +50%% tax found (significant, +40%% to +60%%) in %d of %d sweeps; want all", taxFound, n)
			}
			if p := stats.BinomialTail(n-taxCover, n, 0.05); p < 0.001 {
				t.Errorf("Williams orders: the tax's CI missed it in %d of %d sweeps, above the nominal 5%% (binomial p = %.2g)", n-taxCover, n, p)
			}
		})
	}
}

// aaBound is the largest A/A difference a sweep may show significant by
// chance: an A/A pair is significant in α = 5% of sweeps, with a
// difference of the order of the run noise (1%), never of the drift a
// bias would bring (+5% a run).
const aaBound = 0.04
