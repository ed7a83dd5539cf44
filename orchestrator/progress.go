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

// progress shows where a sweep is: a bar with an ETA over blocks × cells on
// a terminal, plain lines otherwise, nothing with --quiet.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	bar   *progressbar.ProgressBar
	quiet bool
	total int
	done  int
	cur   string
	phase string
	last  string
	lastT time.Time
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
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetWidth(24),
			progressbar.OptionFullWidth(),
			progressbar.OptionClearOnFinish(),
		)
	}
	return p
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
	p.render(true)
}

// setPhase records the current phase: launch, ready, warmup, measure, drain.
func (p *progress) setPhase(phase string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if phase == p.phase {
		return
	}
	p.phase = phase
	p.render(false)
}

// finish counts a run and shows its key numbers.
func (p *progress) finish(summary string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	p.last = summary
	if p.bar != nil {
		p.bar.Describe(p.cur + " done: " + summary)
		p.bar.Add(1)
		return
	}
	if !p.quiet {
		fmt.Fprintf(p.w, "[%d/%d] %s: %s\n", p.done, p.total, p.cur, summary)
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

// log prints a message without breaking the bar.
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
	p.render(true)
}

func (p *progress) render(force bool) {
	if p.quiet {
		return
	}
	if p.bar != nil {
		desc := fmt.Sprintf("%s [%s]", p.cur, p.phase)
		if p.last != "" {
			desc += " | last: " + p.last
		}
		p.bar.Describe(desc)
		return
	}
	if force || time.Since(p.lastT) > 2*time.Second {
		p.lastT = time.Now()
		fmt.Fprintf(p.w, "[%d/%d] %s: %s\n", p.done, p.total, p.cur, p.phase)
	}
}

func (p *progress) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Finish()
		fmt.Fprintln(p.w)
	}
}
