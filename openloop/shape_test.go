package openloop

import (
	"encoding/binary"
	"encoding/json"
	"github.com/mbench/mbench/stats"
	"hash/fnv"
	"math"
	"reflect"
	"sort"
	"strconv"
	"testing"
)

// repeatedBlockTokens counts, over prompts in order, the tokens in full
// 16-token blocks whose whole prefix (chain of blocks, as vLLM's prefix cache
// hashes them) already appeared in an earlier prompt — what an infinite
// prefix cache would hit. It also returns the total number of tokens.
func repeatedBlockTokens(prompts [][]int32) (repeated, total int) {
	const bs = 16
	seen := map[uint64]bool{}
	for _, p := range prompts {
		total += len(p)
		h := fnv.New64a()
		var b [4]byte
		prefixHit := true
		for j := 0; j+bs <= len(p); j += bs {
			for _, t := range p[j : j+bs] {
				binary.LittleEndian.PutUint32(b[:], uint32(t))
				h.Write(b[:])
			}
			k := h.Sum64()
			if prefixHit && seen[k] {
				repeated += bs
			} else {
				prefixHit = false
			}
			seen[k] = true
		}
	}
	return repeated, total
}

func TestSharedPrefixRepeatFraction(t *testing.T) {
	for _, tc := range []struct{ n, groups, prefix, input int }{
		{400, 16, 512, 1024},
		{400, 200, 512, 1024},
		{300, 8, 500, 2000},
		{500, 50, 64, 128},
	} {
		g := promptGen{seed: 11, shape: Shape{Input: tc.input, Output: 8, Prefix: &Prefix{NumPrefixes: tc.groups, PrefixTokens: tc.prefix}}}
		var prompts [][]int32
		for i := range tc.n {
			toks, _, grp := g.open(i, nil)
			if len(toks) != tc.input || grp < 1 || grp > tc.groups {
				t.Fatalf("request %d: %d tokens group %d", i, len(toks), grp)
			}
			prompts = append(prompts, toks)
		}
		rep, total := repeatedBlockTokens(prompts)
		got := float64(rep) / float64(total)
		// Formula: every request after the first of its group repeats the
		// group's full blocks; E[groups seen] = G(1-(1-1/G)^N).
		G, N := float64(tc.groups), float64(tc.n)
		distinct := G * (1 - math.Pow(1-1/G, N))
		want := (N - distinct) * float64(tc.prefix/16*16) / (N * float64(tc.input))
		if math.Abs(got-want) > 0.02 {
			t.Errorf("%+v: repeated fraction %.4f, formula %.4f (> 2 pp apart)", tc, got, want)
		}
	}
}

func TestLengthDistributions(t *testing.T) {
	const n = 20000
	r := streamRNG(1, saltLengths, 0)
	u := Dist{Kind: "uniform", Min: 10, Max: 20}
	var sum float64
	for range n {
		v := u.Sample(r)
		if v < 10 || v > 20 {
			t.Fatalf("uniform sample %d outside [10, 20]", v)
		}
		sum += float64(v)
	}
	if m := sum / n; math.Abs(m-15) > 0.1 {
		t.Errorf("uniform mean %.3f, want 15", m)
	}
	ln := Dist{Kind: "lognormal", Median: 1000, P90: 4000}
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(ln.Sample(r))
	}
	sort.Float64s(xs)
	if med := stats.Quantile(xs, 0.5); math.Abs(med/1000-1) > 0.03 {
		t.Errorf("lognormal median %.1f, want 1000 within 3%%", med)
	}
	if p90 := stats.Quantile(xs, 0.9); math.Abs(p90/4000-1) > 0.03 {
		t.Errorf("lognormal p90 %.1f, want 4000 within 3%%", p90)
	}
	clip := Dist{Kind: "lognormal", Median: 1000, P90: 4000, Min: 900, Max: 1100}
	for range 1000 {
		if v := clip.Sample(r); v < 900 || v > 1100 {
			t.Fatalf("clipped sample %d outside [900, 1100]", v)
		}
	}
}

func TestPromptsDeterministic(t *testing.T) {
	s := Shape{InputDist: &Dist{Kind: "uniform", Min: 5, Max: 50}, OutputDist: &Dist{Kind: "uniform", Min: 1, Max: 9}}
	a := promptGen{seed: 3, shape: s}
	b := promptGen{seed: 3, shape: s}
	c := promptGen{seed: 4, shape: s}
	for i := range 50 {
		ta, oa, _ := a.open(i, nil)
		tb, ob, _ := b.open(i, nil)
		tc, _, _ := c.open(i, nil)
		if !reflect.DeepEqual(ta, tb) || oa != ob {
			t.Fatalf("request %d differs under the same seed", i)
		}
		if reflect.DeepEqual(ta, tc) {
			t.Fatalf("request %d identical under seeds 3 and 4", i)
		}
		for _, tok := range ta {
			if tok < TokenIDMin || tok >= TokenIDMax {
				t.Fatalf("token %d outside [%d, %d)", tok, TokenIDMin, TokenIDMax)
			}
		}
	}
}

func TestCompletionBody(t *testing.T) {
	b := appendCompletionBody(nil, `m"x`, []int32{1001, 2002, 3003}, 7, &defaultTail)
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	want := map[string]any{"model": `m"x`, "prompt": []any{1001.0, 2002.0, 3003.0}, "max_tokens": 7.0, "min_tokens": 7.0,
		"ignore_eos": true, "stream": true, "stream_options": map[string]any{"include_usage": true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("body %s", b)
	}
}

func TestShapeValidate(t *testing.T) {
	for _, tc := range []struct {
		s    Shape
		want string
	}{
		{Shape{Input: 0, Output: 1}, "input: must be in [1, 4194304] tokens, got 0"},
		{Shape{Input: 1, Output: 1, OutputDist: &Dist{Kind: "normal"}}, `output_dist: kind: "normal" is not uniform or lognormal`},
		{Shape{Input: 1, Output: 1, InputDist: &Dist{Kind: "uniform", Min: 5, Max: 2}}, "input_dist: uniform: need 1 ≤ min ≤ max, got min 5 max 2"},
		{Shape{Input: 1, Output: 1, InputDist: &Dist{Kind: "lognormal", Median: 10, P90: 5}}, "input_dist: lognormal: p90: must be > median 10, got 5"},
		{Shape{Input: 10, Output: 1, Prefix: &Prefix{NumPrefixes: 2, PrefixTokens: 20}}, "prefix: prefix_tokens: 20 exceeds input 10 (input is the whole prompt)"},
		{Shape{Input: 10, Output: 1, Prefix: &Prefix{NumPrefixes: 0, PrefixTokens: 2}}, "prefix: num_prefixes: must be ≥ 1, got 0"},
		{Shape{Input: 10, Output: 1, CacheFill: &CacheFill{Prefixes: 3}}, "cache_fill: prefix_tokens: must be in [1, 4194304], got 0"},
		{Shape{Trace: &Trace{}}, "trace: path: must be set"},
		{Shape{Trace: &Trace{Path: "x", TimeScale: -1}}, "trace: time_scale: must be > 0 (or 0 for 1), got -1"},
		{Shape{Input: 10, Output: 1}, ""},
	} {
		err := tc.s.Validate()
		if (err == nil) != (tc.want == "") || err != nil && err.Error() != tc.want {
			t.Errorf("Validate(%+v) = %v, want %q", tc.s, err, tc.want)
		}
	}
}

// TestShapeProblems: Problems reports every broken rule of a shape at its
// path, Validate the first of them; a rule over two fields waits for the
// other to hold on its own, so one bad value is reported once.
func TestShapeProblems(t *testing.T) {
	for _, tc := range []struct {
		s    Shape
		want []string
	}{
		{Shape{Input: 10, Output: 0, InputDist: &Dist{Kind: "lognormal", Median: 10, P90: 5, Min: 8, Max: 4},
			Prefix: &Prefix{NumPrefixes: 0, PrefixTokens: 20}, CacheFill: &CacheFill{Prefixes: 1}},
			[]string{"input_dist.p90", "input_dist.max", "output", "prefix.num_prefixes", "cache_fill.prefix_tokens"}},
		{Shape{Input: 0, Output: 1, Prefix: &Prefix{NumPrefixes: 1, PrefixTokens: 20}}, []string{"input"}},
		{Shape{Input: 10, Output: 1, Prefix: &Prefix{NumPrefixes: 1, PrefixTokens: 20}}, []string{"prefix.prefix_tokens"}},
		{Shape{Input: 1, Output: 1, InputDist: &Dist{Kind: "lognormal", P90: 5}}, []string{"input_dist.median"}},
		{Shape{Input: 1, Output: 1, InputDist: &Dist{Kind: "uniform", Min: -1, Max: 2}}, []string{"input_dist.min"}},
		{Shape{Trace: &Trace{TimeScale: -1, RequestLimit: -1}}, []string{"trace.path", "trace.time_scale", "trace.request_limit"}},
		{Shape{Trace: &Trace{}, Dataset: &Dataset{}}, []string{"trace"}},
		{Shape{Output: -1, Dataset: &Dataset{Format: "csv"}}, []string{"output", "dataset.path", "dataset.format"}},
		{Shape{Input: 1, Output: 1}, nil},
	} {
		checkProblems(t, tc.s, tc.s.Problems(), tc.s.Validate(), tc.want)
	}
}

// checkProblems holds what's Problems to the paths want, in order, and its
// Validate to the first of them.
func checkProblems(t *testing.T, what any, ps []*FieldError, err error, want []string) {
	t.Helper()
	var got []string
	for _, p := range ps {
		got = append(got, p.Path)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Problems(%+v) at %q, want %q", what, got, want)
	}
	if (err == nil) != (len(want) == 0) || err != nil && err.(*FieldError).Path != want[0] {
		t.Errorf("Validate(%+v) = %v, want the first of %q", what, err, want)
	}
}

// TestArrivalProblems: every broken rule of an arrival at its path, a
// closed loop's ramp once (not its keys as well), Validate the first.
func TestArrivalProblems(t *testing.T) {
	for _, tc := range []struct {
		a    Arrival
		want []string
	}{
		{Arrival{Process: ArrivalConcurrency, Ramp: &Ramp{Kind: "step"}, MaxInFlight: 2},
			[]string{"arrival.ramp", "arrival.max_in_flight", "arrival.in_flight"}},
		{Arrival{Process: ArrivalGamma, InFlight: 2, Ramp: &Ramp{Kind: "step", From: -1}, MaxInFlight: -1},
			[]string{"arrival.in_flight", "arrival.ramp.kind", "arrival.ramp.duration", "arrival.ramp.from", "arrival.max_in_flight", "arrival.burstiness"}},
		{Arrival{Process: ArrivalPoisson}, nil},
	} {
		checkProblems(t, tc.a, tc.a.Problems(), tc.a.Validate(), tc.want)
	}
}

// TestAppendTokenList: the list is what strconv writes, for ids of every
// length and sign.
func TestAppendTokenList(t *testing.T) {
	ids := []int32{0, 7, 10, 99, 1000, 30999, 99999, 100000, 2147483647, -1, -2147483648, 12345}
	var want []byte
	for i, id := range ids {
		if i > 0 {
			want = append(want, ',')
		}
		want = strconv.AppendInt(want, int64(id), 10)
	}
	if got := appendTokenList([]byte("x"), ids); string(got) != "x"+string(want) {
		t.Errorf("got %s, want x%s", got, want)
	}
	if got := appendTokenList(nil, nil); len(got) != 0 {
		t.Errorf("empty list: %q", got)
	}
}
