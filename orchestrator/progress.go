package orchestrator

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows where a sweep is: a bar on a terminal, plain lines
// otherwise, nothing with --quiet. Either way the time left is mbench's own
// estimate (eta): the runs left times the mean time of the runs measured in
// this process, bounded by the sweep's time budget.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	bar   *progressbar.ProgressBar
	quiet bool
	total int
	done  int
	cur   string // the run in progress, "" between runs
	phase string
	last  string
	lastT time.Time

	// The estimate of the time left: the runs measured in this process and
	// their time, and when the budget ends (zero: no budget).
	began     time.Time
	timed     int
	timeSpent time.Duration
	budgetEnd time.Time
}

func newProgress(w io.Writer, total int, quiet bool) *progress {
	p := &progress{w: w, total: total, quiet: quiet}
	if quiet {
		return p
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(false), // the library's guess knows neither the plan nor the budget: eta does
			progressbar.OptionSetWidth(24),
			progressbar.OptionFullWidth(),
			progressbar.OptionClearOnFinish(),
		)
	}
	return p
}

// setBudget bounds the estimate: the sweep starts no block after end.
func (p *progress) setBudget(end time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.budgetEnd = end
}

// grow raises the total when the stopping rule adds a block.
func (p *progress) grow(total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if total > p.total {
		p.total = total
		if p.bar != nil {
			p.bar.ChangeMax(total)
		}
	}
}

// begin announces the run about to start.
func (p *progress) begin(run string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur, p.phase = run, "launch"
	p.began = time.Now()
	p.render(true)
}

// setPhase records the current phase: launch, ready, warmup, measure, drain.
func (p *progress) setPhase(phase string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if phase == p.phase || p.cur == "" {
		return
	}
	p.phase = phase
	p.render(false)
}

// finish counts a run and shows its key numbers and the time left.
func (p *progress) finish(summary string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if !p.began.IsZero() {
		p.timed++
		p.timeSpent += time.Since(p.began)
		p.began = time.Time{}
	}
	p.last = summary
	cur := p.cur
	p.cur = ""
	if p.bar != nil {
		p.bar.Describe(cur + " done: " + summary + p.etaSuffix())
		p.bar.Add(1)
		return
	}
	if !p.quiet {
		fmt.Fprintf(p.w, "[%d/%d] %s: %s%s\n", p.done, p.total, cur, summary, p.etaSuffix())
	}
}

// skip counts a run skipped without being measured; the reason was said
// when its cell was given up.
func (p *progress) skip() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if p.bar != nil {
		p.bar.Add(1)
	}
}

// again shows the outcome of an attempt that is run again in place: the
// run is not counted until its last attempt finishes.
func (p *progress) again(summary string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = summary
	if p.bar != nil {
		p.bar.Describe(p.cur + " again: " + summary)
		return
	}
	if !p.quiet {
		fmt.Fprintf(p.w, "[%d/%d] %s: %s\n", p.done, p.total, p.cur, summary)
	}
}

// log prints a message without breaking the bar. Off a terminal the
// message is its own line: the run's line is not repeated after it.
func (p *progress) log(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quiet {
		return
	}
	if p.bar != nil {
		p.bar.Clear()
	}
	fmt.Fprintln(p.w, msg)
	if p.bar != nil {
		p.render(true)
	}
}

func (p *progress) render(force bool) {
	if p.quiet || p.cur == "" {
		return
	}
	if p.bar != nil {
		desc := fmt.Sprintf("%s [%s]", p.cur, p.phase)
		if p.last != "" {
			desc += " | last: " + p.last
		}
		p.bar.Describe(desc + p.etaSuffix())
		return
	}
	if force || time.Since(p.lastT) > 2*time.Second {
		p.lastT = time.Now()
		fmt.Fprintf(p.w, "[%d/%d] %s: %s\n", p.done, p.total, p.cur, p.phase)
	}
}

// eta is the time the runs left should take: their number times the mean
// time of the runs measured so far (each from its launch to its verdict),
// or until the budget ends, when that comes first. ok is false before a
// run has been measured, or when none is left.
func (p *progress) eta() (d time.Duration, byBudget, ok bool) {
	left := p.total - p.done
	if p.timed == 0 || left <= 0 {
		return 0, false, false
	}
	d = time.Duration(left) * (p.timeSpent / time.Duration(p.timed))
	if !p.budgetEnd.IsZero() {
		if b := time.Until(p.budgetEnd); b < d {
			return max(b, 0), true, true
		}
	}
	return d, false, true
}

// etaSuffix is the estimate as the lines show it: " · 13 to go, about
// 3m12s left", or "… by the time budget".
func (p *progress) etaSuffix() string {
	d, byBudget, ok := p.eta()
	if !ok {
		return ""
	}
	switch {
	case byBudget && d == 0:
		return fmt.Sprintf(" · %d planned to go; the time budget is spent: the block under way is the last", p.total-p.done)
	case byBudget:
		return fmt.Sprintf(" · %d to go, about %s left (the time budget ends first)", p.total-p.done, roundETA(d))
	}
	return fmt.Sprintf(" · %d to go, about %s left", p.total-p.done, roundETA(d))
}

// roundETA rounds an estimate to what it is worth: seconds under a
// minute, else whole ten seconds, else (over an hour) minutes.
func roundETA(d time.Duration) time.Duration {
	switch {
	case d < time.Minute:
		return d.Round(time.Second)
	case d < time.Hour:
		return d.Round(10 * time.Second)
	}
	return d.Round(time.Minute)
}

func (p *progress) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Finish()
		fmt.Fprintln(p.w)
	}
}
