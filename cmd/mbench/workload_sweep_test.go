package main

// Issue 10 workloads through the CLI: matrix sweeps with a trace shape, gamma
// arrivals and cache fill on the simulated engine; `mbench trace sample`;
// malformed traces refused before anything launches.

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/hangguard"
	"github.com/mbench/mbench/openloop"
)

// sweepRun is one journaled run of a sweep: its summary and its requests.
type sweepRun struct {
	key     string
	dir     string // the run directory
	summary map[string]any
	recs    []openloop.Record
	scrapes []map[string]any // metrics.jsonl
}

// runWorkloadSweep runs matrix body (with %PORT% and %TRACE% filled in) through the
// CLI and returns its runs, every one of which must have measured
// (measuredStatuses): their workload and cache figures are what these tests
// check, whatever the timing verdicts.
func runWorkloadSweep(t *testing.T, body string, wantRuns int) []sweepRun {
	t.Helper()
	return runWorkloadSweepAllowing(t, body, wantRuns, measuredStatuses...)
}

// runWorkloadSweepAllowing is runWorkloadSweep accepting runs journaled with
// any of the statuses given.
func runWorkloadSweepAllowing(t *testing.T, body string, wantRuns int, statuses ...string) []sweepRun {
	t.Helper()
	trace, err := filepath.Abs(syntheticTrace)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := writeMatrix(t, dir, strings.ReplaceAll(body, "%TRACE%", trace))
	out := filepath.Join(dir, "out")
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	if stdout, stderr, err := runSweepCLI(t, ctx, "run", m, "--out", out, "--quiet"); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	var runs []sweepRun
	for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
		r := sweepRun{key: l["cell"].(string) + "/b" + jsonNum(l["block"])}
		if st, _ := l["status"].(string); !slices.Contains(statuses, st) {
			t.Fatalf("run %s: status %v (%v)", r.key, l["status"], l["reason"])
		}
		rd := filepath.Join(out, l["dir"].(string))
		r.dir = rd
		data, err := os.ReadFile(filepath.Join(rd, "summary_A.json"))
		if err == nil {
			err = json.Unmarshal(data, &r.summary)
		}
		if err != nil {
			t.Fatalf("run %s: summary: %v", r.key, err)
		}
		if data, err = os.ReadFile(filepath.Join(rd, "requests.jsonl")); err != nil {
			t.Fatal(err)
		}
		if r.recs, err = openloop.ReadRecords(bytes.NewReader(data)); err != nil {
			t.Fatalf("run %s: requests.jsonl: %v", r.key, err)
		}
		r.scrapes = readJSONL(t, filepath.Join(rd, "metrics.jsonl"))
		runs = append(runs, r)
	}
	if len(runs) != wantRuns {
		t.Fatalf("%d runs journaled, want %d", len(runs), wantRuns)
	}
	return runs
}

// cache returns the run summary's prefix_cache object.
func (r sweepRun) cache(t *testing.T) map[string]any {
	t.Helper()
	c, ok := r.summary["prefix_cache"].(map[string]any)
	if !ok || c["hit_rate_valid"] != true {
		t.Fatalf("run %s: prefix_cache %v", r.key, r.summary["prefix_cache"])
	}
	return c
}

// checkSessions checks that each session's turns were sent in order, each
// after the previous one finished, and returns the most sessions open at once
// (a session is open from its first send to its last completion; a request
// without a session is a session of its own).
func checkSessions(t *testing.T, key string, recs []openloop.Record) (peak int) {
	t.Helper()
	bySession := map[string][]openloop.Record{}
	for _, r := range recs {
		k := r.Session
		if k == "" {
			k = "#" + jsonNum(r.ID)
		}
		bySession[k] = append(bySession[k], r)
	}
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for sid, rs := range bySession {
		sort.Slice(rs, func(i, j int) bool { return rs[i].SentNs < rs[j].SentNs })
		for k := 1; k < len(rs); k++ {
			if rs[k].Turn != rs[k-1].Turn+1 || rs[k].SentNs < rs[k-1].DoneNs {
				t.Errorf("run %s session %s: turn %d sent at %d, turn %d done at %d", key, sid, rs[k].Turn, rs[k].SentNs, rs[k-1].Turn, rs[k-1].DoneNs)
			}
		}
		edges = append(edges, edge{rs[0].SentNs, 1}, edge{rs[len(rs)-1].DoneNs, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		return edges[i].at < edges[j].at || edges[i].at == edges[j].at && edges[i].delta < edges[j].delta
	})
	open := 0
	for _, e := range edges {
		open += e.delta
		peak = max(peak, open)
	}
	return peak
}

const traceSweep = `name: agentic-test
seed: 9
engine:
  kind: sim
  port: %PORT%
  ready_timeout: 20s
  grace: 2s
  restart: every_run
  sim: {step_base_us: 400, prefill_token_us: 0.1, decode_seq_us: 5, kv_blocks: 1024}
configs: {plain: {}}
rates: [1, 2]
shapes:
  - name: agentic
    trace: {path: %TRACE%, time_scale: 25, request_limit: 60, max_inflight_sessions: 3}
measure: {warmup_requests: 4, min_completed: 56, timeout: 30s, drain_timeout: 5s}
repeat: {min: 1, max: 1}
gate: {enabled: false}
`

// TestWorkloadTraceSweep: a trace shape with rate multipliers [1, 2] runs
// through a sweep; each run replays exactly request_limit requests, in
// session order under max_inflight_sessions, with a prefix-cache hit rate.
func TestWorkloadTraceSweep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end sweep")
	}
	runs := runWorkloadSweep(t, traceSweep, 2)
	spans := map[float64]float64{}
	for _, r := range runs {
		if n := len(r.recs); n != 60 {
			t.Errorf("run %s: %d requests, want request_limit 60", r.key, n)
		}
		if c := r.summary["completed"].(float64); c != 56 {
			t.Errorf("run %s: completed %v, want 60 - 4 warmup", r.key, c)
		}
		if hr := r.cache(t)["hit_rate"].(float64); !(hr > 0.3) {
			t.Errorf("run %s: prefix-cache hit rate %v, want > 0.3 (the trace reuses most blocks)", r.key, hr)
		}
		if peak := checkSessions(t, r.key, r.recs); peak != 3 {
			t.Errorf("run %s: %d sessions open at once, want max_inflight_sessions 3 (it binds at this speed)", r.key, peak)
		}
		// Records are written as requests finish, so the first trace time
		// is the least one, not the first line's.
		first, last := r.recs[0].TraceNs, r.recs[0].TraceNs
		for _, rec := range r.recs {
			first, last = min(first, rec.TraceNs), max(last, rec.TraceNs)
		}
		spans[r.summary["rate"].(float64)] = float64(last - first)
	}
	// The rate multiplier compresses the trace's own send times.
	if got := spans[1] / spans[2]; math.Abs(got-2) > 0.01 {
		t.Errorf("trace span at rate 1 / at rate 2 = %.3f, want 2", got)
	}
}

const fillSweep = `name: fill-test
seed: 4
engine:
  kind: sim
  port: %PORT%
  ready_timeout: 20s
  grace: 2s
  restart: every_run
  sim: {step_base_us: 400, prefill_token_us: 0.1, decode_seq_us: 5}
configs: {plain: {}}
arrival: {process: gamma, burstiness: 0.5}
rates: [40]
shapes:
  - {name: shared, input: 1024, output: 4, prefix: {num_prefixes: 4, prefix_tokens: 768}}
  - {name: shared_fill, input: 1024, output: 4, prefix: {num_prefixes: 4, prefix_tokens: 768}, cache_fill: {prefixes: 64, prefix_tokens: 1024}}
measure: {warmup_requests: 4, min_completed: 60, timeout: 30s, drain_timeout: 5s}
repeat: {min: 1, max: 1}
gate: {enabled: false}
`

// TestWorkloadGammaAndCacheFillSweep: gamma arrivals and a cache_fill shape
// through a sweep. Fill requests are phase "fill" and stay out of the
// latency statistics; they leave the cache fuller during the measured window;
// and since fill prompts never share tokens with measured prompts, the
// window's hits are, with and without the fill, the measured prompts' own:
// no fewer than those sent after a group-mate's first token came back, no
// more than every open-loop request's shared prefix.
func TestWorkloadGammaAndCacheFillSweep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end sweep")
	}
	runs := runWorkloadSweep(t, fillSweep, 2)
	for _, r := range runs {
		shape := r.summary["shape"].(string)
		if r.summary["arrival"] != "gamma" {
			t.Errorf("run %s: arrival %v, want gamma", r.key, r.summary["arrival"])
		}
		var gaps []float64
		fill, measured := 0, 0
		var prev int64 = -1
		for _, rec := range r.recs {
			switch rec.Phase {
			case openloop.PhaseFill:
				fill++
				continue
			case openloop.PhaseMeasure:
				measured++
			}
			if prev >= 0 {
				gaps = append(gaps, float64(rec.ScheduledNs-prev))
			}
			prev = rec.ScheduledNs
		}
		if want := map[string]int{"shared": 0, "shared_fill": 64}[shape]; fill != want {
			t.Errorf("run %s: %d fill requests, want %d", r.key, fill, want)
		}
		if c := r.summary["completed"].(float64); int(c) != measured || c < 60 {
			t.Errorf("run %s: completed %v, want the %d measured requests (≥ 60, fill excluded)", r.key, c, measured)
		}
		if cv := gapCV(gaps); cv < 1.1 {
			t.Errorf("run %s: scheduled gaps CV %.2f, want about 1/√0.5 = 1.41 (gamma b=0.5)", r.key, cv)
		}
		c := r.cache(t)
		q, h := c["queries"].(float64), c["hits"].(float64)
		// The window starts as the measured phase begins: the fill's and
		// the warmup's queries (already scheduled by then) stay out of it.
		var measuredTok, early float64
		for _, rec := range r.recs {
			if rec.Phase == openloop.PhaseMeasure {
				measuredTok += float64(rec.InputTokens)
			} else {
				early += float64(rec.InputTokens)
			}
		}
		if q < measuredTok-1 || q > measuredTok+early/2 {
			t.Errorf("run %s: the window counts %v prefix-cache queried tokens; the measured requests sent %v (fill and warmup %v)", r.key, q, measuredTok, early)
		}
		// A group's prefix (48 whole blocks) is cached once a request of
		// the group has finished its prefill; when its first token came
		// back is the machine's, so the hits lie between the sure ones and
		// the most the open-loop requests (warmup and measured) could make.
		const perHit = 768
		var sure, most float64
		firstTok := map[int]int64{}
		for _, rec := range bySend(r.recs) {
			if rec.Phase == openloop.PhaseFill {
				continue
			}
			most += perHit
			if ft, ok := firstTok[rec.PrefixGroup]; ok && ft < rec.SentNs && rec.Phase == openloop.PhaseMeasure {
				sure += perHit
			}
			if ft, ok := firstTok[rec.PrefixGroup]; !ok || rec.FirstTokenNs < ft {
				firstTok[rec.PrefixGroup] = rec.FirstTokenNs
			}
		}
		t.Logf("run %s (%s): hit tokens %v of %v queried; sure %v, most %v", r.key, shape, h, q, sure, most)
		if h < sure || h > most {
			t.Errorf("run %s: the window counts %v hit tokens, want from %v (measured requests sent after a group-mate's first token) to %v (every open-loop request's prefix; the fill shares none)", r.key, h, sure, most)
		}
		// Ground truth of the cache's content at the end (8192 blocks: no
		// eviction): each group's 48 prefix blocks, each open-loop
		// request's 16 suffix blocks, each fill prompt's 64 blocks.
		groups := map[int]bool{}
		want := 0
		for _, rec := range r.recs {
			if rec.Phase == openloop.PhaseFill {
				want += 1024 / 16
				continue
			}
			groups[rec.PrefixGroup] = true
			want += (1024 - 768) / 16
		}
		want += 768 / 16 * len(groups)
		for _, s := range r.scrapes {
			if v, _ := s["values"].(map[string]any)["mbench_sim_cached_blocks"].(float64); s["phase"] == "after" && int(v) != want {
				t.Errorf("run %s: %v blocks cached after the run, want %d", r.key, v, want)
			}
		}
	}
}

func gapCV(xs []float64) float64 {
	m, v := 0.0, 0.0
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return math.Sqrt(v/float64(len(xs)-1)) / m
}
