package matrices

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// Limits bound a sweep's size; a matrix beyond them is refused before its
// cells are expanded, unless its limits section raises them:
//
//	limits: {cells: 50000, runs: 500000, duration: 1440h}
//
// They are no part of the measurement: not in the hash, not in cell ids.
type Limits struct {
	Cells    int           // configs × rates × shapes
	Runs     int           // cells × repeat.max
	Duration time.Duration // the estimate of repeat.min blocks (EstimateDuration)
}

// DefaultLimits are the limits of a matrix without a limits section: far
// beyond any sweep one machine finishes (10^4 cells of a minute each is a
// week), near enough that a typo (rates: [1..300] pasted three times) is
// caught at once.
var DefaultLimits = Limits{Cells: 10_000, Runs: 100_000, Duration: 30 * 24 * time.Hour}

// limits decodes the limits section.
func (d *decoder) limits(v *yaml.Node, m *Matrix) {
	m.Limits = DefaultLimits
	if v == nil {
		return
	}
	d.object(v, "limits", v.Line, []field{
		{"cells", false, func(v *yaml.Node, p string) { m.Limits.Cells = d.intField(v, p, 1, 1<<40) }},
		{"runs", false, func(v *yaml.Node, p string) { m.Limits.Runs = d.intField(v, p, 1, 1<<40) }},
		{"duration", false, func(v *yaml.Node, p string) { m.Limits.Duration = d.positiveDuration(v, p) }},
	})
}

// checkCells refuses, before anything expands them, more cells than
// limits.cells allows; it reports whether the count is within the limit.
func (d *decoder) checkCells(m *Matrix, line int) bool {
	rates := max(len(m.Rates), 1) // a capacity search or a closed loop: its levels count once here
	n := float64(len(m.ConfigOrder)) * float64(rates) * float64(len(m.Shapes))
	if n <= float64(m.Limits.Cells) {
		return true
	}
	d.add(line, "rates", "at most limits.cells cells (default 10000); raise limits: {cells: N} if the sweep is meant",
		"the sweep has %.0f cells (%d configs × %d rates × %d shapes), more than the limit of %d: is this the matrix you meant?",
		n, len(m.ConfigOrder), rates, len(m.Shapes), m.Limits.Cells)
	return false
}

// checkSize refuses a sweep of more runs or a longer estimate than its
// limits allow; it runs once the matrix is whole and its cells few enough
// to expand.
func (m *Matrix) checkSize() error {
	cells := len(m.Cells())
	if runs := cells * m.Repeat.Max; runs > m.Limits.Runs {
		return fmt.Errorf("the sweep has up to %d runs (%d cells × repeat.max %d), more than the limit of %d; raise limits: {runs: N} if the sweep is meant",
			runs, cells, m.Repeat.Max, m.Limits.Runs)
	}
	if est := m.EstimateDuration(); est > m.Limits.Duration {
		return fmt.Errorf("the sweep's %d cells × %d blocks (repeat.min) are estimated at %s, more than the limit of %s; raise limits: {duration: D} if the sweep is meant",
			cells, m.Repeat.Min, fmtDays(est), fmtDays(m.Limits.Duration))
	}
	return nil
}

// fmtDays is d in days and hours when it is a day or more.
func fmtDays(d time.Duration) string {
	if d < 24*time.Hour {
		return d.String()
	}
	days := d / (24 * time.Hour)
	return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
}
