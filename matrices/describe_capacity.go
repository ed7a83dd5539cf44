package matrices

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jedib0t/go-pretty/v6/table"
)

// CapacityPlan is how a capacity search will proceed, for `mbench validate`
// and `mbench run --dry-run` (which has no cells to list: the search
// chooses its rates): the SLO, the search's bounds, the searches with the
// cells of their first two probes, and an estimate of its runs and time.
// Empty for a fixed-rate sweep.
func (m *Matrix) CapacityPlan() string {
	c := m.Capacity
	if c == nil {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	scale := math.Pow(2, float64(c.Expand))
	what := "offered rate"
	if c.Concurrency() {
		what = "number of requests kept in flight (a closed loop)"
	}
	p("capacity search: per config and shape, the highest %s at which %s (the %ss are the search's, not the matrix's)\n", what, c.ConstraintsText(), c.unit())
	floor := c.Lo / scale
	if c.Concurrency() {
		floor = math.Max(1, math.Floor(floor))
	}
	p("  round 1 probes lo=%s and hi=%s; while nothing fails it doubles the highest %s (up to %s = hi×2^%d), while nothing holds it halves the lowest (down to %s);\n",
		fmtRate(c.Lo), fmtRate(c.Hi), c.unit(), fmtRate(c.Hi*scale), c.Expand, fmtRate(floor))
	p("  then it bisects (geometrically) between the highest %s that held and the lowest that failed until they are within %g%% (tolerance %g)%s\n",
		c.unit(), 100*c.Tolerance, c.Tolerance, map[bool]string{true: " or adjacent levels", false: ""}[c.Concurrency()])
	p("  every probed %s runs once in each of %d blocks (it holds when the %g%% CI of every bounded metric's mean over them meets its bound); at most %d probed %ss per search (max_probes)\n",
		c.unit(), c.Blocks, 100*m.Repeat.Confidence, c.MaxProbes, c.unit())

	t := table.NewWriter()
	t.SetStyle(table.StyleLight)
	t.AppendHeader(table.Row{"search", "config", "shape", "same_as", "cell @lo", "cell @hi"})
	var first, next []Cell // round 1's probes, and one bisection probe per search
	mid := math.Sqrt(c.Lo * c.Hi)
	for _, name := range m.ConfigOrder {
		cfg := m.Configs[name]
		for _, sh := range m.Shapes {
			lo, hi := m.cell(name, c.Lo, sh), m.cell(name, c.Hi, sh)
			first = append(first, lo, hi)
			probe := lo
			probe.Rate = mid
			next = append(next, probe)
			t.AppendRow(table.Row{len(next), name, sh.Name, cfg.SameAs, lo.ID, hi.ID})
		}
	}
	b.WriteString(t.Render())
	b.WriteString("\n")

	searches := len(next)
	k := bisections(c)
	expected := c.ExpectedProbes()
	pass := func(cells []Cell) float64 { return m.passSeconds(cells) * float64(c.Blocks) }
	expSecs := pass(first) + float64(expected-2)*pass(next)
	maxSecs := pass(first) + float64(c.MaxProbes-2)*pass(next)
	p("%d searches × %d probed %ss × %d blocks = %d runs ≈ %s when the capacity lies within [lo, hi] and every probe is decided (%d bisections to reach %g%%)\n",
		searches, expected, c.unit(), c.Blocks, searches*expected*c.Blocks, secondsDuration(expSecs), k, 100*c.Tolerance)
	p("at most %d runs (max_probes %d) ≈ %s at %ss within [lo, hi]; probes below lo (halvings) run longer; uncertain probes (CIs straddling a bound) add bisections on both sides of them\n",
		searches*c.MaxProbes*c.Blocks, c.MaxProbes, secondsDuration(maxSecs), c.unit())
	p("runs per round: %d in round 1, then one probe per unfinished search; each run: warmup %d + min_completed %d requests (capped at measure.timeout %s)\n",
		len(first)*c.Blocks, m.Measure.WarmupRequests, m.Measure.MinCompleted, m.Measure.Timeout)
	return b.String()
}

// ExpectedProbes is how many rates a search probes when the capacity lies
// within [Lo, Hi] and every probe is decided: Lo, Hi and the bisections
// that narrow them to the tolerance, at most MaxProbes.
func (c *Capacity) ExpectedProbes() int { return min(2+bisections(c), c.MaxProbes) }

// bisections is how many geometric bisections take [lo, hi] to within
// 1+tolerance.
func bisections(c *Capacity) int {
	w := math.Log(c.Hi/c.Lo) / math.Log1p(c.Tolerance)
	if w <= 1 {
		return 0
	}
	return int(math.Ceil(math.Log2(w)))
}

// unit is what the search probes, in words.
func (c *Capacity) unit() string {
	if c.Concurrency() {
		return "in-flight level"
	}
	return "rate"
}

func fmtRate(r float64) string { return strconv.FormatFloat(r, 'g', 4, 64) }
