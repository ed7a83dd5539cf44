package simengine

import (
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// checkParts asserts the decomposition of every logged step: the parts add
// up to step_duration_us, unaccounted is 0, and connector timers are present
// exactly when a connector is configured.
func checkParts(t *testing.T, steps []map[string]float64, connector bool) {
	t.Helper()
	for i, s := range steps {
		_, bm := s["build_meta_us"]
		_, gf := s["get_finished_us"]
		if bm != connector || gf != connector {
			t.Fatalf("step %d: build_meta/get_finished present %v/%v, want %v", i, bm, gf, connector)
		}
		sum := s["schedule_us"] + s["build_meta_us"] + s["execute_us"] + s["update_us"] + s["get_finished_us"]
		if d := s["step_duration_us"] - sum; math.Abs(d) > 0.005 || s["unaccounted_us"] != 0 {
			t.Fatalf("step %d: parts sum to %.3f of %.3f µs, unaccounted %v", i, sum, s["step_duration_us"], s["unaccounted_us"])
		}
	}
}

// TestStepTimingMatchesModel: every logged step is the model's duration,
// and the wall clock never runs ahead of the model by more than the loop's
// timeline allows (maxLag: a wake-up that late keeps the timeline, a later
// one restarts it): the client's first token comes no earlier than the
// prefill step, the logged step ends no closer together than the steps'
// durations, each less maxLag.
// How close to the model the wall clock stays is a timing claim, the
// machine's: BenchmarkStepTiming measures it.
func TestStepTimingMatchesModel(t *testing.T) {
	const base, perPrefill, perDecode, tokens, requests = 8000.0, 2.0, 40.0, 15, 2
	te := startEngine(t, Config{StepBaseUs: base, PrefillTokenUs: perPrefill, DecodeSeqUs: perDecode, Jitter: -1})
	// One request first, so the measured ones reuse a warm connection; its
	// one step is left out of the log check below.
	if status, out := te.post(t, `{"prompt":[1],"max_tokens":1}`); status != 200 {
		t.Fatalf("warm-up: %d %s", status, out)
	}
	wantFirst, wantDecode := base+100*perPrefill, base+perDecode
	lagUs := float64(maxLag.Microseconds())
	for r := 1; r <= requests; r++ {
		// A fresh prompt each time: a repeat would hit the prefix cache.
		payloads, at := streamTimes(t, te.url, `{"prompt":`+idsPrompt(100, 1000*r)+`,"max_tokens":15,"ignore_eos":true,"stream":true}`)
		if len(payloads) != tokens+1 {
			t.Fatalf("%d events, want %d tokens + [DONE]", len(payloads), tokens)
		}
		ttft := at[0].Seconds() * 1e6
		itl := (at[tokens-1] - at[0]).Seconds() * 1e6 / (tokens - 1)
		t.Logf("TTFT %.0f µs (model %.0f), mean ITL %.0f µs (model %.0f)", ttft, wantFirst, itl, wantDecode)
		if ttft < wantFirst-lagUs {
			t.Errorf("request %d: TTFT %.0f µs, before the modelled prefill step of %.0f µs could end (less maxLag)", r, ttft, wantFirst)
		}
	}
	steps := te.steps(t)[1:]
	if len(steps) != tokens*requests {
		t.Fatalf("%d steps logged, want %d (one prefill, 14 decodes per request)", len(steps), tokens*requests)
	}
	checkParts(t, steps, false)
	for r := 0; r < requests; r++ {
		req := steps[r*tokens : (r+1)*tokens]
		var sumDecode float64
		for i, s := range req {
			want, prefill, decode := wantDecode, 0.0, 1.0
			if i == 0 {
				want, prefill, decode = wantFirst, 100, 0
			} else {
				sumDecode += s["step_duration_us"]
			}
			if math.Abs(s["step_duration_us"]-want) > 0.001 || s["num_prefill_tokens"] != prefill ||
				s["num_decode_tokens"] != decode || s["num_running"] != 1 || s["num_waiting"] != 0 || s["pid"] == 0 {
				t.Errorf("request %d step %d: %v, want duration %v µs, prefill %v, decode %v", r, i, s, want, prefill, decode)
			}
		}
		// ts_us is whole µs: one of rounding per end.
		if span := req[tokens-1]["ts_us"] - req[0]["ts_us"]; span < sumDecode-lagUs-2 {
			t.Errorf("request %d: the decode steps' logged ends span %.0f µs, less than their %.0f µs of modelled time", r, span, sumDecode)
		}
	}
}

// BenchmarkStepTiming measures how closely the wall clock follows the
// model: per request (one 8.2 ms prefill step, 14 decode steps of 8.04 ms),
// the client's TTFT beyond the prefill step and its mean inter-token
// latency beyond a decode step, in µs (the machine's lateness; the model's
// part is exact, TestStepTimingMatchesModel).
func BenchmarkStepTiming(b *testing.B) {
	const base, perPrefill, perDecode, tokens = 8000.0, 2.0, 40.0, 15
	te := startEngine(b, Config{StepBaseUs: base, PrefillTokenUs: perPrefill, DecodeSeqUs: perDecode, Jitter: -1})
	te.post(b, `{"prompt":[1],"max_tokens":1}`)
	wantFirst, wantDecode := base+100*perPrefill, base+perDecode
	var ttftErr, itlErr float64
	for i := 0; b.Loop(); i++ {
		_, at := streamTimes(b, te.url, `{"prompt":`+idsPrompt(100, 1000*(i+1))+`,"max_tokens":15,"ignore_eos":true,"stream":true}`)
		ttftErr += at[0].Seconds()*1e6 - wantFirst
		itlErr += (at[tokens-1]-at[0]).Seconds()*1e6/(tokens-1) - wantDecode
	}
	b.ReportMetric(ttftErr/float64(b.N), "ttft_late_us")
	b.ReportMetric(itlErr/float64(b.N), "itl_late_us")
}

func TestBatchingAndChunkingInStepLog(t *testing.T) {
	te := startEngine(t, Config{StepBaseUs: 2000, Jitter: -1, TokenBudget: 128})
	var wg sync.WaitGroup
	for _, body := range []string{
		`{"prompt":` + idsPrompt(300, 0) + `,"max_tokens":40,"ignore_eos":true,"stream":true}`,
		`{"prompt":` + idsPrompt(10, 1000) + `,"max_tokens":8,"ignore_eos":true,"stream":true}`,
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if status, out, err := te.postErr(body); err != nil || status != 200 {
				t.Errorf("status %d, %v: %s", status, err, out)
			}
		}()
		time.Sleep(time.Millisecond) // keep the arrival order
	}
	wg.Wait()
	steps := te.steps(t)
	checkParts(t, steps, false)
	var prefills []float64
	twoDecoding := false
	for _, s := range steps {
		if s["num_prefill_tokens"] > 0 {
			prefills = append(prefills, s["num_prefill_tokens"])
		}
		if s["num_running"] == 2 && s["num_decode_tokens"] == 2 {
			twoDecoding = true
		}
		if s["num_prefill_tokens"]+s["num_decode_tokens"] > 128 {
			t.Errorf("step over the token budget: %v", s)
		}
	}
	// The 300-token prompt is chunked by the 128-token budget (128+128+44
	// alone, or 127+127+46 next to a decoding request); the 10-token prompt
	// rides along wherever budget is left. Arrival order is up to the race.
	total, full := 0.0, 0
	for _, p := range prefills {
		total += p
		if p >= 127 {
			full++
		}
	}
	if total != 310 || full < 2 || len(prefills) < 3 {
		t.Errorf("prefill tokens per step %v, want 310 in all, at least two budget-bound chunks (>= 127)", prefills)
	}
	if !twoDecoding {
		t.Errorf("no step decoded both requests together (continuous batching): %v", steps)
	}
}

func TestWalkConnectorBuildMetaGrowsWithCache(t *testing.T) {
	const walkNs, connUs = 2000.0, 10.0
	te := startEngine(t, Config{StepBaseUs: 300, PrefillTokenUs: -1, DecodeSeqUs: -1, Jitter: -1,
		Connector: ConnectorWalk, WalkNsPerBlock: walkNs, ConnectorUs: connUs})
	for k := 0; k < 4; k++ { // each prompt: 10 full blocks of new content
		if status, out := te.post(t, `{"prompt":`+idsPrompt(160, 1000*k)+`,"max_tokens":2,"ignore_eos":true}`); status != 200 {
			t.Fatalf("status %d: %s", status, out)
		}
	}
	steps := te.steps(t)
	checkParts(t, steps, true)
	if len(steps) != 8 {
		t.Fatalf("%d steps, want 8", len(steps))
	}
	for i, s := range steps {
		k := i / 2
		cached := 10 * k // before request k's prefill step
		if i%2 == 1 {
			cached = 10 * (k + 1) // its blocks are cached once prefilled
		}
		wantBM := connUs/2 + walkNs*float64(cached)/1000
		if math.Abs(s["build_meta_us"]-wantBM) > 0.001 || s["get_finished_us"] != connUs/2 {
			t.Errorf("step %d: build_meta %v get_finished %v, want %v and %v", i, s["build_meta_us"], s["get_finished_us"], wantBM, connUs/2)
		}
		if want := 300 + wantBM + connUs/2; math.Abs(s["step_duration_us"]-want) > 0.001 {
			t.Errorf("step %d: duration %v, want %v", i, s["step_duration_us"], want)
		}
	}
}

func TestCostModelDecomposition(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		cfg                       Config
		prefill, decode, cached   int
		total, buildMeta, execute float64
	}{
		{"plain", Config{}, 100, 4, 0, 2000 + 100 + 120, 0, 2220 - 200},
		{"constant", Config{Connector: ConnectorConstant, ConnectorUs: 16}, 0, 1, 0, 2030 + 16, 8, 2030 - 200},
		{"walk", Config{Connector: ConnectorWalk, WalkNsPerBlock: 100}, 0, 1, 10000, 2030 + 1000, 1000, 1830},
		// Async: execute (1830) hides schedule (100) + build_meta (1000).
		{"async walk hidden", Config{Connector: ConnectorWalk, WalkNsPerBlock: 100, Async: true}, 0, 1, 10000, 1830 + 100, 1000, 1830 - 1100},
		// Async: the CPU side (100 + 3000) outlasts execute (1830).
		{"async walk exposed", Config{Connector: ConnectorWalk, WalkNsPerBlock: 300, Async: true}, 0, 1, 10000, 3100 + 100, 3000, 0},
		{"async plain", Config{Async: true}, 0, 1, 0, 1830 + 100, 0, 1730},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Jitter = -1
			m := newCostModel(cfg.withDefaults())
			c := m.cost(0, tc.prefill, tc.decode, tc.cached, 0)
			parts := c.schedule + c.buildMeta + c.execute + c.update + c.getFinished
			if math.Abs(c.total-tc.total) > 1e-6 || math.Abs(c.buildMeta-tc.buildMeta) > 1e-6 ||
				math.Abs(c.execute-tc.execute) > 1e-6 || math.Abs(parts-c.total) > 1e-6 {
				t.Errorf("cost %+v, want total %v build_meta %v execute %v (parts sum %v)", c, tc.total, tc.buildMeta, tc.execute, parts)
			}
			line := (&stepLog{}).encode(stepRecord{endWall: time.Now(), cost: c})
			var rec map[string]any
			if err := json.Unmarshal(line, &rec); err != nil {
				t.Fatal(err)
			}
			if _, ok := rec["build_meta_us"]; ok != c.connector || strings.Count(string(line), "\n") != 1 {
				t.Errorf("step line %s: build_meta_us present %v, want %v", line, ok, c.connector)
			}
		})
	}
}

func TestColdStartSlowsFirstSteps(t *testing.T) {
	te := startEngine(t, Config{StepBaseUs: 1500, PrefillTokenUs: -1, DecodeSeqUs: -1, Jitter: -1, ColdSteps: 3, ColdFactor: 4})
	sent := float64(time.Now().UnixMicro())
	if status, out := te.post(t, `{"prompt":[1,2,3],"max_tokens":8,"ignore_eos":true}`); status != 200 {
		t.Fatalf("status %d: %s", status, out)
	}
	steps := te.steps(t)
	checkParts(t, steps, false)
	for i, s := range steps {
		want := 1500.0
		if i < 3 {
			want = 6000
		}
		if math.Abs(s["step_duration_us"]-want) > 0.001 {
			t.Errorf("step %d: %v µs, want %v", i, s["step_duration_us"], want)
		}
	}
	// The cold steps also take that long on the wall clock: the first step
	// starts after the send, and a step never ends before its deadline
	// (how much later is the machine's doing: BenchmarkStepTiming).
	const planned = 3*6000 + 1500
	if end := steps[3]["ts_us"] - sent; end < planned {
		t.Errorf("step 4 ended %.0f µs after the send, before the %d µs the model plans", end, planned)
	}
}

func TestNoiseAndJitter(t *testing.T) {
	f := func(seed int64, noise float64) float64 {
		return newCostModel(Config{Noise: noise, Seed: seed}.withDefaults()).launchFactor
	}
	if f(1, 0) != 1 || f(1, 0.1) != f(1, 0.1) || f(1, 0.1) == f(2, 0.1) {
		t.Fatalf("launch factor: noise 0 gives %v; seeds 1,1,2 give %v %v %v", f(1, 0), f(1, 0.1), f(1, 0.1), f(2, 0.1))
	}
	sd := func(xs []float64) float64 {
		var m, v float64
		for _, x := range xs {
			m += x
		}
		m /= float64(len(xs))
		for _, x := range xs {
			v += (x - m) * (x - m)
		}
		return math.Sqrt(v / float64(len(xs)-1))
	}
	var launch []float64
	for s := int64(0); s < 400; s++ {
		launch = append(launch, math.Log(f(s, 0.1)))
	}
	if got := sd(launch); math.Abs(got-0.1) > 0.015 {
		t.Errorf("sd of log launch factor over 400 seeds = %.4f, want 0.1", got)
	}
	m := newCostModel(Config{Jitter: 0.05, Seed: 9}.withDefaults())
	var steps []float64
	for i := 0; i < 2000; i++ {
		c := m.cost(int64(i), 0, 0, 0, 0)
		steps = append(steps, math.Log(c.total/2000))
	}
	if got := sd(steps); math.Abs(got-0.05) > 0.004 {
		t.Errorf("sd of log step factor = %.4f, want 0.05", got)
	}
	// The launch factor scales logged step time.
	e, err := New(Config{Noise: 0.2, Seed: 5, Jitter: -1, StepBaseUs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if c := e.cost.cost(0, 0, 0, 0, 0); math.Abs(c.total-1000*e.LaunchFactor()) > 1e-6 || e.LaunchFactor() == 1 {
		t.Errorf("step %v µs with launch factor %v, want 1000×factor", c.total, e.LaunchFactor())
	}
}
