package router

import (
	"math/rand/v2"
	"testing"
)

// prompt returns n tokens: the first shared tokens from stream 0 (a common
// prefix), the rest from stream id.
func prompt(id uint64, shared, n int) []int64 {
	a, b := rand.New(rand.NewPCG(0, 0)), rand.New(rand.NewPCG(id, 1))
	out := make([]int64, n)
	for i := range out {
		if i < shared {
			out[i] = a.Int64N(1 << 30)
		} else {
			out[i] = b.Int64N(1 << 30)
		}
	}
	return out
}

func newRouter(t *testing.T, n int, o Options) *Router {
	t.Helper()
	targets := make([]string, n)
	for i := range targets {
		targets[i] = "http://127.0.0.1:" + string(rune('0'+i))
	}
	r, err := New(targets, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRoundRobin(t *testing.T) {
	r := newRouter(t, 3, Options{Policy: RoundRobin})
	for k := range 10 {
		d := r.Decide("s", prompt(1, 0, 64))
		if d.Decode != k%3 || d.Prefill != d.Decode || d.Reason != "round_robin" {
			t.Fatalf("request %d: %+v", k, d)
		}
		r.Finish(d)
	}
}

// TestStickyOverride: a session stays on its instance until that instance
// carries more than twice the mean load (and ≥ 2 requests); then it moves to
// the least loaded instance and stays there.
func TestStickyOverride(t *testing.T) {
	r := newRouter(t, 4, Options{Policy: Sticky})
	first := r.Decide("a", prompt(1, 0, 64))
	if first.Reason != "new" || first.Pinned != -1 {
		t.Fatalf("first request: %+v", first)
	}
	home := first.Decode
	// Keep requests of session a in flight: loads home=k, others 0. Mean =
	// k/4; overloaded when k ≥ 2 and k > 2·k/4 — so the third request moves.
	var open []*Decision
	open = append(open, first)
	for k := 1; k <= 2; k++ {
		d := r.Decide("a", prompt(1, 0, 64))
		open = append(open, d)
		wantOverride := k == 2
		if (d.Reason == "override") != wantOverride || (d.Decode == home) == wantOverride || d.Pinned != home {
			t.Fatalf("request %d with %d in flight on home: %+v", k+1, k, d)
		}
		if wantOverride {
			if d.Loads[d.Decode] != 0 {
				t.Errorf("overridden to a loaded instance: %+v", d)
			}
			for _, o := range open {
				r.Finish(o)
			}
			again := r.Decide("a", prompt(1, 0, 64))
			if again.Decode != d.Decode || again.Reason != "sticky" {
				t.Errorf("after the override the session went to %d (%s), want its new home %d", again.Decode, again.Reason, d.Decode)
			}
			r.Finish(again)
		}
	}
}

// warm sends a prompt to instance i through a sticky session pinned there.
func warm(t *testing.T, r *Router, session string, p []int64, want int) {
	t.Helper()
	d := r.Decide(session, p)
	if d.Decode != want {
		t.Fatalf("warming instance %d went to %d", want, d.Decode)
	}
	r.Finish(d)
}

// TestLinearAndLMetricScores: placement of a new session follows each
// policy's formula, computed here from the loads and cached prefixes the
// test set up.
func TestLinearAndLMetricScores(t *testing.T) {
	const n = 3
	// Instance 0 holds prefix P (4096 tokens) and carries 2 requests;
	// instance 1 holds nothing and carries 1; instance 2 is idle and empty.
	// A new 5000-token prompt starting with P:
	//   linear (α): 0: 2 − α·4096/5000, 1: 1, 2: 0
	//   lmetric:    0: (pending0 + 904)·3, 1: (pending1 + 5000)·2, 2: 5000·1
	for _, tc := range []struct {
		policy Policy
		alpha  float64
		want   int
	}{
		{Linear, 4, 0},  // 2 − 3.28 = −1.28 < 0
		{Linear, 1, 2},  // 2 − 0.82 = 1.18 > 0
		{LMetric, 0, 0}, // pending 0 (finished warm-up): 904·3 = 2712 < 5000
	} {
		r := newRouter(t, n, Options{Policy: tc.policy, Alpha: tc.alpha, OverrideFactor: 100})
		p := prompt(9, 4096, 5000)
		// Pin sessions to instances 0, 1, 2 in turn (all idle: rotation
		// gives 0, 1, 2 under every scoring policy... check it).
		warm(t, r, "w0", prompt(100, 4096, 4200), 0)
		warm(t, r, "w1", prompt(101, 0, 100), 1)
		warm(t, r, "w2", prompt(102, 0, 100), 2)
		// Loads: two open requests on 0, one on 1.
		open := []*Decision{r.Decide("w0", prompt(103, 0, 50)), r.Decide("w0", prompt(104, 0, 50)), r.Decide("w1", prompt(105, 0, 50))}
		for _, o := range open {
			r.PrefillDone(o) // their prefill is over: no pending tokens
		}
		d := r.Decide("new", p)
		if d.Decode != tc.want {
			t.Errorf("%s α=%v: new session went to %d, want %d (scores %v, loads %v)", tc.policy, tc.alpha, d.Decode, tc.want, d.Scores, d.Loads)
		}
		if d.Decode == 0 && d.CachedTokens != 4096 {
			t.Errorf("%s: estimated %d cached tokens on instance 0, want 4096", tc.policy, d.CachedTokens)
		}
	}
}

// TestOffloadCap: HEAVY requests prefill on another instance and decode on
// their sticky one, at most MaxOffload at a time; lighter ones stay.
func TestOffloadCap(t *testing.T) {
	r := newRouter(t, 4, Options{Policy: Sticky, Offload: true, HeavyTokens: 1000, MaxOffload: 2, OverrideFactor: 100})
	light := r.Decide("s", prompt(1, 0, 900))
	if light.Prefill != light.Decode || light.Class != Warm {
		t.Fatalf("light request offloaded: %+v", light)
	}
	r.Finish(light)
	home := light.Decode
	var open []*Decision
	for k := range 3 {
		d := r.Decide("s", prompt(uint64(10+k), 0, 3000))
		if d.Decode != home {
			t.Fatalf("heavy request %d decodes on %d, not the sticky %d", k, d.Decode, home)
		}
		offloaded := d.Prefill != d.Decode
		if want := k < 2; offloaded != want {
			t.Fatalf("heavy request %d with %d offloads in flight: offloaded=%v (%s)", k, k, offloaded, d.Reason)
		}
		open = append(open, d)
	}
	if open[0].Prefill == open[1].Prefill {
		t.Errorf("two offloads went to the same prefill instance %d: round-robin over the others expected", open[0].Prefill)
	}
	r.PrefillDone(open[0]) // one offload done: room for another
	d := r.Decide("s", prompt(20, 0, 3000))
	if d.Prefill == d.Decode {
		t.Errorf("after an offload finished the next HEAVY request stayed: %s", d.Reason)
	}
}

func TestClassOf(t *testing.T) {
	b := [3]int{5000, 20000, 50000}
	for _, tc := range []struct {
		n    int
		want Class
	}{{0, Warm}, {4999, Warm}, {5000, Medium}, {19999, Medium}, {20000, Heavy}, {49999, Heavy}, {50000, HeavyLarge}} {
		if got := classOf(tc.n, b); got != tc.want {
			t.Errorf("classOf(%d) = %s, want %s", tc.n, got, tc.want)
		}
	}
	if _, err := New([]string{"http://x"}, nil, Options{Classes: [3]int{5, 5, 6}}); err == nil {
		t.Error("non-increasing classes accepted")
	}
	if _, err := ParsePolicy("random"); err == nil {
		t.Error("unknown policy accepted")
	}
}

// TestPrefixIndexLRU: a bounded index forgets the least recently used blocks.
func TestPrefixIndexLRU(t *testing.T) {
	p := newPrefixIndex(4)
	p.insert([]uint64{1, 2, 3})
	p.insert([]uint64{7, 8}) // 4 blocks max: 3 (the tail of the first) goes
	if got := p.match([]uint64{1, 2, 3}); got != 2 {
		t.Errorf("match after eviction = %d, want 2", got)
	}
	if got := p.match([]uint64{7, 8}); got != 2 {
		t.Errorf("match of the newest = %d, want 2", got)
	}
}

// TestPDRoundRobinAlternates: with round_robin placement over producers and
// the decode choice over consumers, each pointer advances once per request,
// so with an even number of producers every producer gets its share (the
// bug this guards: one shared pointer advanced twice per request sent every
// prefill to the even-indexed producers).
func TestPDRoundRobinAlternates(t *testing.T) {
	for _, np := range []int{2, 3, 4} {
		targets := []string{"http://c0", "http://c1"}
		var producers []string
		for i := range np {
			producers = append(producers, "http://p"+itoa(i))
		}
		r, err := New(targets, producers, Options{Policy: RoundRobin})
		if err != nil {
			t.Fatal(err)
		}
		pre, dec := map[int]int{}, map[int]int{}
		const n = 120
		for k := range n {
			d := r.Decide("", prompt(uint64(k), 0, 64))
			if want := len(targets) + k%np; d.Prefill != want {
				t.Fatalf("%d producers, request %d: prefill on %d, want %d", np, k, d.Prefill, want)
			}
			pre[d.Prefill]++
			dec[d.Decode]++
			r.Finish(d)
		}
		for i := range np {
			if pre[len(targets)+i] != n/np {
				t.Errorf("%d producers: prefills per producer %v, want %d each", np, pre, n/np)
			}
		}
		if dec[0] != n/2 || dec[1] != n/2 {
			t.Errorf("%d producers: decodes per consumer %v, want %d each", np, dec, n/2)
		}
	}
}

// TestCappedOffloadKeepsRotation: an offload refused by the cap picks no
// target, so the next offload goes to the target after the last one used,
// not one further on.
func TestCappedOffloadKeepsRotation(t *testing.T) {
	r := newRouter(t, 4, Options{Policy: Sticky, Offload: true, HeavyTokens: 1000, MaxOffload: 1, OverrideFactor: 100})
	first := r.Decide("s", prompt(1, 0, 3000))
	if !first.offload {
		t.Fatalf("first HEAVY request not offloaded: %s", first.Reason)
	}
	home := first.Decode
	for k := range 5 { // all capped: one offload in flight
		d := r.Decide("s", prompt(uint64(10+k), 0, 3000))
		if d.offload || d.Reason != "sticky+offload_capped" {
			t.Fatalf("capped request %d: %+v", k, d)
		}
		r.Finish(d)
	}
	r.Finish(first)
	second := r.Decide("s", prompt(30, 0, 3000))
	// The rotation over the other instances resumes after first.Prefill.
	want := first.Prefill
	for {
		want = (want + 1) % 4
		if want != home {
			break
		}
	}
	if !second.offload || second.Prefill != want {
		t.Errorf("offload after 5 capped ones went to %d (%s), want %d (the one after %d, skipping home %d)",
			second.Prefill, second.Reason, want, first.Prefill, home)
	}
}

// TestHeavyBoundOneRule: the offload threshold and the class bounds follow
// one rule — a bound belongs to the class above it — so with the defaults
// a request of exactly 20,000 new tokens is HEAVY and offloaded, and one of
// 19,999 is MEDIUM and not.
func TestHeavyBoundOneRule(t *testing.T) {
	for _, c := range []struct {
		tokens  int
		class   Class
		offload bool
	}{{19999, Medium, false}, {20000, Heavy, true}, {20001, Heavy, true}, {4999, Warm, false}, {5000, Medium, false}, {50000, HeavyLarge, true}} {
		r := newRouter(t, 3, Options{Policy: Sticky, Offload: true})
		d := r.Decide("s", prompt(uint64(c.tokens), 0, c.tokens))
		if d.NewTokens != c.tokens || d.Class != c.class || (d.Split() == "offload") != c.offload {
			t.Errorf("%d new tokens: %d estimated, class %s, split %q; want class %s, offloaded %v", c.tokens, d.NewTokens, d.Class, d.Split(), c.class, c.offload)
		}
	}
}

// TestLoadDefaults: LMetric's BS is the engine's waiting + running + 1 by
// default (the agentic experiments' definition); the router's own count is
// an option; the other policies count the router's requests by default.
func TestLoadDefaults(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want LoadSource
	}{
		{Options{Policy: LMetric}, LoadEngine},
		{Options{Policy: LMetric, Load: LoadShadow}, LoadShadow},
		{Options{Policy: Linear}, LoadShadow},
		{Options{}, LoadShadow},
	} {
		o, err := c.o.withDefaults()
		if err != nil || o.Load != c.want {
			t.Errorf("%+v: load %q (%v), want %q", c.o, o.Load, err, c.want)
		}
	}
}
