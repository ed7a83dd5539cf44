package results

import (
	"fmt"
	"slices"

	"github.com/mbench/mbench/stats"
)

// ClassComparison compares one request class of a config with the
// baseline's over the same requests: per block, the requests of the class
// that completed under both runs (same request ids), their TTFT median and
// p90 on each side, then the paired comparison of those per-block figures
// (Compare: log ratio per block, t-CI over blocks).
type ClassComparison struct {
	Config, Baseline, Shape string
	Rate                    float64
	Class                   string
	// Paired is the number of requests compared per block (mean over
	// blocks); Dropped those of the class left out because they failed on
	// either side (mean over blocks).
	Paired, Dropped float64
	BaseP50, P50    float64 // TTFT p50 over the paired requests, mean over blocks, ms
	BaseP90, P90    float64 // and p90
	TTFTP50         Comparison
	TTFTP90         Comparison
}

// classComparisons pairs each config's cells with the baseline's (same
// shape and rate) and compares every class over the same requests, by
// the runs' request TTFTs (Run.TTFTs); a run without them (its
// requests.jsonl could not be read) leaves its block out.
func classComparisons(s *Sweep, cells []*Cell) []ClassComparison {
	base := map[groupKey]*Cell{}
	for _, c := range cells {
		if c.Info.SameAs == "" && c.Info.Config == s.Baseline {
			base[groupKey{c.Info.Shape, c.Info.Rate}] = c
		}
	}
	var out []ClassComparison
	for _, c := range cellOrder(s, cells) {
		b := base[groupKey{c.Info.Shape, c.Info.Rate}]
		if b == nil || c == b || c.Info.SameAs != "" {
			continue
		}
		for ci, name := range ClassNames {
			cc := ClassComparison{Config: c.Info.Config, Baseline: b.Info.Config, Shape: c.Info.Shape, Rate: c.Info.Rate, Class: name}
			b50, t50, b90, t90 := map[int]float64{}, map[int]float64{}, map[int]float64{}, map[int]float64{}
			var paired, dropped, bp50, tp50, bp90, tp90 []float64
			for blk, tr := range c.usable() {
				br := b.usable()[blk]
				if br == nil || tr.Sum.Classes == nil || br.Sum.Classes == nil || ci >= len(tr.Sum.Classes.Classes) || ci >= len(br.Sum.Classes.Classes) {
					continue
				}
				// The class's requests: the same ids under a
				// config-independent basis; under the router's estimate,
				// those in the class under both.
				ids := intersect(br.Sum.Classes.Classes[ci].IDs, tr.Sum.Classes.Classes[ci].IDs)
				bt, tt := br.TTFTs, tr.TTFTs
				if bt == nil || tt == nil || len(ids) == 0 {
					continue
				}
				var bx, tx []float64
				for _, id := range ids {
					x, ok1 := bt[id]
					y, ok2 := tt[id]
					if ok1 && ok2 {
						bx, tx = append(bx, x), append(tx, y)
					}
				}
				if len(bx) == 0 {
					continue
				}
				paired, dropped = append(paired, float64(len(bx))), append(dropped, float64(len(ids)-len(bx)))
				slices.Sort(bx)
				slices.Sort(tx)
				b50[blk], t50[blk] = stats.PercentileSorted(bx, 50), stats.PercentileSorted(tx, 50)
				b90[blk], t90[blk] = stats.PercentileSorted(bx, 90), stats.PercentileSorted(tx, 90)
				bp50, tp50 = append(bp50, b50[blk]), append(tp50, t50[blk])
				bp90, tp90 = append(bp90, b90[blk]), append(tp90, t90[blk])
			}
			if len(paired) == 0 {
				continue
			}
			cc.Paired, cc.Dropped = stats.Mean(paired), stats.Mean(dropped)
			cc.BaseP50, cc.P50 = stats.Mean(bp50), stats.Mean(tp50)
			cc.BaseP90, cc.P90 = stats.Mean(bp90), stats.Mean(tp90)
			cc.TTFTP50, cc.TTFTP90 = Compare(b50, t50, s.Confidence), Compare(b90, t90, s.Confidence)
			out = append(out, cc)
		}
	}
	return out
}

// intersect returns the values in both ascending lists.
func intersect(a, b []int) []int {
	var out []int
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] < b[j]:
			i++
		case a[i] > b[j]:
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	return out
}

// renderClassComparisons writes the per-class comparisons with the
// baseline over the same requests; one line when there are none.
var renderClassComparisons = tableSection("Request classes compared", classComparisonTables)

// classComparisonTables is the table of classComparisons.
func classComparisonTables(v *reportView) ([]sectionTable, string) {
	rows := v.a.Classes
	if len(rows) == 0 {
		return nil, fmt.Sprintf("no class has requests completed under both a config and the baseline %s.", orDefault(v.s.Baseline, "(none)"))
	}
	t := sectionTable{ID: "class-comparisons", Title: "Request classes compared with the baseline",
		Intro: fmt.Sprintf("Each class over the same requests: per block the requests of the class that completed under both runs (by request id), "+
			"their TTFT median and p90 on each side, compared across blocks (change with %s CI; paired t). "+
			"Paired = requests per block, dropped = the class's requests that failed on either side (means over blocks).", pctConf(v.s.Confidence)),
		Head: []string{"Config", "vs", "Shape", "Rate", "Class", "Paired", "Dropped", "TTFT p50 (base → config, ms)", "TTFT p50 change", "TTFT p90 change", "Blocks"}}
	if classBasisOf(v.ordered).DependsOnRouting() {
		t.Notes = append(t.Notes, "The classes are the router's estimates, which differ between configs: a request is compared in a class only when both configs put it there.")
	}
	for _, r := range rows {
		t.Rows = append(t.Rows, []string{r.Config, r.Baseline, r.Shape, fmtFloat(r.Rate), r.Class,
			fmtCount(r.Paired), fmtCount(r.Dropped), fmtNum(r.BaseP50) + " → " + fmtNum(r.P50), changeText(r.TTFTP50, r.BaseP50, r.P50),
			changeText(r.TTFTP90, r.BaseP90, r.P90), fmt.Sprint(r.TTFTP50.N)})
	}
	return []sectionTable{t}, ""
}

// changeText is a comparison's effect with its CI; with one block, the
// change of that block (base → treat) without one.
func changeText(c Comparison, base, treat float64) string {
	if c.N < 2 {
		if base <= 0 {
			return "—"
		}
		return fmt.Sprintf("%+.1f%% (one block: no CI)", 100*(treat/base-1))
	}
	return fmt.Sprintf("%+.1f%% [%+.1f%%, %+.1f%%]", 100*c.Effect, 100*c.Lo, 100*c.Hi)
}

// pctConf is a confidence in percent (0: the 95% default).
func pctConf(conf float64) string {
	if conf <= 0 || conf >= 1 {
		conf = 0.95
	}
	return fmt.Sprintf("%g%%", 100*conf)
}
