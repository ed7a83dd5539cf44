package results

import (
	"math"
	"slices"
	"sort"

	"github.com/mbench/mbench/stats"
)

// The two-stage method (docs/method.md, "Stopping rule"). The stopping rule
// plans the sweep from its first stage: it stops once every comparison's
// Stein two-stage half-width — the first stage's spread over all blocks —
// is within target, and the CI the report will then print is within target
// too, never before the second stage has blocks of its own. Because the stop
// is decided by the first stage's spread, a sweep that stopped early had a
// quiet first stage, and a CI that took its spread from those blocks would be
// too narrow exactly then. So a comparison of a sweep the rule stopped takes
// its spread from the second-stage blocks (independent of the projection),
// its centre from every block; the rule waits until that interval, the one
// printed, is within target as well, so "converged" is a claim about what
// the report shows. A sweep that ran to repeat.max or its budget was not
// stopped by a quiet first stage (if anything by a noisy one), and its
// comparisons are ordinary paired t's over every block. A drift with the
// position in the block is estimated across the whole sweep as a nuisance
// effect.

// Method names how a comparison's CI was made.
type Method string

const (
	// MethodTwoStage: Stein's two-stage CI, the spread from the first-stage
	// blocks only, the centre from every block. The stopping rule's
	// projection: how long the sweep runs then depends on the first stage
	// alone.
	MethodTwoStage Method = "two-stage"
	// MethodSecondStage: the spread from the blocks after the first stage
	// only, the centre from every block — the CI of a sweep the stopping
	// rule ended, independent of the first stage's spread that ended it.
	MethodSecondStage Method = "second-stage"
	// MethodPairedT: the ordinary paired t-CI over every block.
	MethodPairedT Method = "paired-t"
)

// Spread says which blocks a comparison's CI takes its spread from.
type Spread struct {
	Method Method // MethodPairedT (zero value: every block), MethodTwoStage or MethodSecondStage
	Stage1 int    // the first stage: blocks numbered ≤ Stage1
}

// from reports whether the i-th paired block (0-based, in block order)
// contributes to the spread. The first stage is the first Stage1 paired
// blocks, not blocks 1..Stage1: a run lost in the first stage (not a result)
// moves the stage's end one paired block on, so the stage still has Stage1
// pairs to plan from and the second stage starts after them.
func (sp Spread) from(i int) bool {
	switch sp.Method {
	case MethodTwoStage:
		return i < sp.Stage1
	case MethodSecondStage:
		return i >= sp.Stage1
	}
	return true
}

// pairedLogs pairs base and treat by block and returns the blocks (sorted)
// and their log ratios log(treat/base); blocks where either value is missing,
// not positive or not finite are left out.
func pairedLogs(base, treat map[int]float64) (blocks []int, logs []float64) {
	for b, t := range treat {
		if v, ok := base[b]; ok && positive(v) && positive(t) {
			blocks = append(blocks, b)
		}
	}
	sort.Ints(blocks)
	for _, b := range blocks {
		logs = append(logs, math.Log(treat[b]/base[b]))
	}
	return blocks, logs
}

// CompareTwoStage is Compare with the CI of Stein's two-stage procedure:
// with n1 the paired blocks numbered ≤ stage1 and s1 the standard deviation
// of their log ratios, the half-width is t_{(1+c)/2, n1−1} · s1/√N around the
// mean log ratio of all N paired blocks, and the p-value is the two-sided
// t-test on n1−1 degrees of freedom. With fewer than two first-stage pairs
// it is the ordinary Compare. The stopping rule projects with it.
func CompareTwoStage(base, treat map[int]float64, stage1 int, confidence float64) Comparison {
	return CompareAdjusted(base, treat, nil, Nuisance{}, Spread{MethodTwoStage, stage1}, confidence)
}

// CompareAdjusted compares base and treat with the CI spread sp; with a used
// nuisance effect each block's log ratio is first corrected by γ·Δpos (dpos:
// block → position of treat minus position of base) and the variance of γ's
// estimate is added to the variance of the mean. With fewer than two blocks
// in the spread's stage it falls back to the ordinary paired t (Method says
// which CI was made). It is the comparison the report prints, over the
// blocks with usable runs on both sides, and the stopping rule tests this
// same interval (plan.View), so a sweep it ends prints every primary CI
// within its target.
func CompareAdjusted(base, treat map[int]float64, dpos map[int]float64, nu Nuisance, sp Spread, confidence float64) Comparison {
	c := Comparison{Confidence: confidence, P: 1, PAdj: 1, PMW: 1, Method: MethodPairedT}
	blocks, logs := pairedLogs(base, treat)
	c.Blocks, c.N = blocks, len(logs)
	var extraVar float64
	if nu.Used {
		var md float64
		for i, b := range blocks {
			logs[i] -= nu.PerPosition * dpos[b]
			md += dpos[b]
		}
		if len(blocks) > 0 {
			md /= float64(len(blocks))
		}
		extraVar = nu.SE * nu.SE * md * md
		c.PositionAdjusted = true
	}
	if c.N < 2 {
		return c
	}
	var stage []float64
	for i := range blocks {
		if sp.from(i) {
			stage = append(stage, logs[i])
		}
	}
	m := stats.Mean(logs)
	sd, df := stats.SampleStd(logs), float64(c.N-1)
	if sp.Method != MethodPairedT && sp.Stage1 > 0 && len(stage) >= 2 {
		sd, df = stats.SampleStd(stage), float64(len(stage)-1)
		c.Method, c.Stage1, c.SpreadBlocks = sp.Method, sp.Stage1, len(stage)
	}
	se := math.Sqrt(sd*sd/float64(c.N) + extraVar)
	switch {
	case se > 0:
		c.P = stats.TTwoSidedP(m/se, df)
	case m != 0:
		c.P = 0
	}
	half := stats.TQuantile((1+confidence)/2, df) * se
	if math.IsNaN(half) {
		half = 0
	}
	c.MeanLog, c.HalfLog, c.PAdj = m, half, c.P
	c.Effect = math.Expm1(m)
	c.Lo, c.Hi = math.Expm1(m-half), math.Expm1(m+half)
	bv, tv := make([]float64, c.N), make([]float64, c.N)
	for i, b := range blocks {
		bv[i], tv[i] = base[b], treat[b]
	}
	if p := stats.MannWhitneyP(bv, tv); !math.IsNaN(p) {
		c.PMW = p
	}
	return c
}

// Nuisance is the estimated effect of a run's position in its block on one
// metric, fitted across the whole sweep: log(value) = cell + block +
// γ·position + noise, by least squares. PerPosition is γ (a log ratio per
// position: 0.01 ≈ +1% per position later in the block). Used says whether
// it was significant at α and so was taken out of the comparisons.
type Nuisance struct {
	Metric      string  `json:"metric"`
	PerPosition float64 `json:"per_position"`
	SE          float64 `json:"se"`
	Lo          float64 `json:"lo"` // CI of PerPosition as fractions
	Hi          float64 `json:"hi"`
	P           float64 `json:"p"`
	DF          int     `json:"df"`
	Runs        int     `json:"runs"`
	Estimated   bool    `json:"estimated"` // enough runs and position spread to fit
	Used        bool    `json:"used"`
}

// Obs is one run for the nuisance fit: its cell, block, position in the
// block (0-based) and metric value.
type Obs struct {
	Cell     string
	Block    int
	Position int
	Value    float64
}

// EstimatePosition fits the position effect of the runs obs (values must be
// positive; others are left out) and marks it used when its two-sided
// p-value is below 1 − confidence. The fit removes cell and block means by
// alternating projections (exact for complete blocks, converging for
// incomplete ones) and regresses the residual log value on the residual
// position; the degrees of freedom are runs − cells − blocks + 1 − 1.
func EstimatePosition(obs []Obs, confidence float64) Nuisance {
	use := slices.DeleteFunc(slices.Clone(obs), func(o Obs) bool { return !positive(o.Value) })
	nu := Nuisance{Runs: len(use), P: 1}
	y := make([]float64, len(use))
	x := make([]float64, len(use))
	cells, blocks := map[string]bool{}, map[int]bool{}
	for i, o := range use {
		y[i], x[i] = math.Log(o.Value), float64(o.Position)
		cells[o.Cell], blocks[o.Block] = true, true
	}
	df := len(use) - len(cells) - len(blocks)
	if df < 2 {
		return nu
	}
	cellOf, blockOf := groupIndex(use, func(o Obs) any { return o.Cell }), groupIndex(use, func(o Obs) any { return o.Block })
	for _, v := range [][]float64{y, x} {
		for it := 0; it < 50; it++ {
			delta := demean(v, cellOf) + demean(v, blockOf)
			if delta < 1e-14 {
				break
			}
		}
	}
	var sxx, sxy float64
	for i := range y {
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	if sxx < 1e-9 {
		return nu
	}
	g := sxy / sxx
	var rss float64
	for i := range y {
		r := y[i] - g*x[i]
		rss += r * r
	}
	se := math.Sqrt(rss / float64(df) / sxx)
	nu.PerPosition, nu.SE, nu.DF, nu.Estimated = g, se, df, true
	half := stats.TQuantile((1+confidence)/2, float64(df)) * se
	nu.Lo, nu.Hi = math.Expm1(g-half), math.Expm1(g+half)
	switch {
	case se > 0:
		nu.P = stats.TTwoSidedP(g/se, float64(df))
	case g != 0:
		nu.P = 0
	}
	nu.Used = nu.P < 1-confidence
	return nu
}

// groupIndex numbers the groups of obs (in order of first appearance) and
// returns each observation's group number.
func groupIndex(obs []Obs, group func(Obs) any) groups {
	ids := map[any]int{}
	of := make([]int, len(obs))
	for i, o := range obs {
		k := group(o)
		id, ok := ids[k]
		if !ok {
			id = len(ids)
			ids[k] = id
		}
		of[i] = id
	}
	return groups{of: of, n: len(ids)}
}

// groups is a partition of observations: of[i] is observation i's group,
// one of n.
type groups struct {
	of []int
	n  int
}

// demean subtracts from v the mean of each group and returns the sum of the
// squared group means removed.
func demean(v []float64, g groups) float64 {
	sum, n := make([]float64, g.n), make([]int, g.n)
	for i, k := range g.of {
		sum[k] += v[i]
		n[k]++
	}
	var moved float64
	for i, k := range g.of {
		m := sum[k] / float64(n[k])
		v[i] -= m
		moved += m * m / float64(n[k])
	}
	return moved
}
