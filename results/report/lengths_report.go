package report

import (
	"fmt"
	"strings"

	"github.com/mbench/mbench/results"
)

// renderOutputLengths writes the output-length distribution of the cells
// whose requests let the engine end at end-of-sequence (natural lengths):
// means over runs of each run's mean, median, p90 and largest output, with
// the max_tokens cap they asked for. Fixed lengths (every request asked for
// and counts max_tokens = min_tokens) are one line; so are natural lengths
// with no usable run to draw them from. Which of the two a sweep asked for is
// read from every run's summary, not only the usable ones.
func renderOutputLengths(b *strings.Builder, v *reportView) {
	type row struct {
		c                      *results.Cell
		mean, median, p90, max float64
		n                      int
	}
	var rows []row
	natural := 0 // runs, usable or not, whose requests let the engine end the output
	for _, c := range v.ordered {
		for _, run := range c.Runs {
			if run.Sum != nil && run.Sum.NaturalLength {
				natural++
			}
		}
		r := row{c: c}
		for _, run := range c.Used {
			ol := run.Sum.OutputLengths
			if !run.Sum.NaturalLength || ol == nil || ol.Mean == nil || ol.Median == nil || ol.P90 == nil {
				continue
			}
			r.n++
			r.mean += *ol.Mean
			r.median += *ol.Median
			r.p90 += *ol.P90
			r.max += float64(ol.Max)
		}
		if r.n > 0 {
			k := float64(r.n)
			r.mean, r.median, r.p90, r.max = r.mean/k, r.median/k, r.p90/k, r.max/k
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 && natural > 0 {
		collapsed(b, "Output lengths", "natural: the engine ended each output (request.ignore_eos: false) in %d runs, but no usable run carries their lengths, so none are drawn; each run's summary_A.json has its own output_lengths.", natural)
		return
	}
	if len(rows) == 0 {
		collapsed(b, "Output lengths", "fixed: every request asked for max_tokens = min_tokens with ignore_eos, so each output is its shape's length (request.ignore_eos: false, or mbench load --ignore-eos=false, lets the engine end it).")
		return
	}
	b.WriteString("## Output lengths (natural: the engine ended each output)\n\n")
	b.WriteString("Output tokens of the completed measured requests, from the usage chunk; means over runs of each run's statistic. The shape's output length is max_tokens, a cap. Latency per token (TPOT) and E2EL depend on these lengths: compare configs only where they are alike.\n\n")
	b.WriteString("| Config | Shape | Rate | mean | p50 | p90 | largest | runs |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %g | %s | %s | %s | %s | %d |\n", r.c.Info.Config, r.c.Info.Shape, r.c.Info.Rate,
			fmtNum(r.mean), fmtNum(r.median), fmtNum(r.p90), fmtNum(r.max), r.n)
	}
	b.WriteString("\n")
}
