package results

import (
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
