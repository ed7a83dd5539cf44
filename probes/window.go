package probes

import (
	"context"
	"errors"
	"sync"

	"github.com/mbench/mbench/openloop"
)

// Window reads engines' /metrics around one run's measured phase, for a
// sweep's run and `mbench load` alike: a round as the measured phase begins
// (taken before its first request leaves, so a warm-up's or a cache fill's
// queries stay out of the window), one every Scraper.Interval during it
// (aside: the dispatcher does not wait), and one after it. Its OnPhase is
// the load generator's Config.OnPhase.
type Window struct {
	scr        *Scraper
	names      MetricNames
	before     []Scrape
	during     []Scrape
	err        error
	once       sync.Once
	opened     bool
	done       chan struct{} // closed when the during-scrapes end (or never began)
	stopDuring context.CancelFunc
	duringCtx  context.Context
}

// NewWindow reads scr's targets by names; ctx bounds the during-scrapes.
func NewWindow(ctx context.Context, scr *Scraper, names MetricNames) *Window {
	w := &Window{scr: scr, names: names, done: make(chan struct{})}
	w.duringCtx, w.stopDuring = context.WithCancel(ctx)
	return w
}

// OnPhase opens the window when the measured phase begins; other phases
// and later calls do nothing.
func (w *Window) OnPhase(ctx context.Context, phase string) {
	if phase != openloop.PhaseMeasure {
		return
	}
	w.once.Do(func() {
		w.opened = true
		var err1 error
		w.before, err1 = w.scr.Round(ctx, PhaseBefore)
		go func() {
			defer close(w.done)
			var err2 error
			w.during, err2 = w.scr.Run(w.duringCtx)
			w.err = errors.Join(err1, err2)
		}()
	})
}

// Close ends the during-scrapes, takes the "after" round (not cut short by
// ctx's cancellation: an interrupted run's window is still read) and
// summarizes the window. opened is false when the measured phase never
// began; err joins every scrape failure.
func (w *Window) Close(ctx context.Context) (before, after []Scrape, cache CacheSummary, opened bool, err error) {
	w.stopDuring()
	w.once.Do(func() { close(w.done) })
	<-w.done
	after, err3 := w.scr.Round(context.WithoutCancel(ctx), PhaseAfter)
	return w.before, after, w.names.Summarize(w.before, after, w.during), w.opened, errors.Join(w.err, err3)
}
