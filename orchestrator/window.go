package orchestrator

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
)

// metricsWindow reads the engines' /metrics around one run's measured
// window: a snapshot as the measured phase begins (taken before the first
// measured request leaves, so a cache-fill phase's queries stay out of the
// window's hit rate and no measured request's fall before it), one every
// interval during it (aside: the dispatcher does not wait), and one after it.
type metricsWindow struct {
	scr        *probes.Scraper
	names      probes.MetricNames
	tr         *http.Transport
	before     []probes.Scrape
	during     []probes.Scrape
	err        error
	once       sync.Once
	started    chan struct{} // closed when the during-scrapes end (or never began)
	stopDuring context.CancelFunc
	duringCtx  context.Context
}

// newMetricsWindow scrapes targets, writing every scrape to sink, and
// reads them by names.
func newMetricsWindow(ctx context.Context, targets []string, sink io.Writer, interval time.Duration, names probes.MetricNames) *metricsWindow {
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	w := &metricsWindow{tr: tr, started: make(chan struct{}), names: names,
		scr: &probes.Scraper{Client: &http.Client{Timeout: 2 * time.Second, Transport: tr}, Targets: targets, Interval: interval, Sink: sink}}
	w.duringCtx, w.stopDuring = context.WithCancel(ctx)
	return w
}

// onPhase is the load generator's Config.OnPhase.
func (w *metricsWindow) onPhase(ctx context.Context, phase string) {
	if phase != openloop.PhaseMeasure {
		return
	}
	w.once.Do(func() {
		var err1 error
		w.before, err1 = w.scr.Round(ctx, probes.PhaseBefore)
		go func() {
			defer close(w.started)
			var err2 error
			w.during, err2 = w.scr.Run(w.duringCtx)
			w.err = errors.Join(err1, err2)
		}()
	})
}

// finish ends the during-scrapes, takes the "after" snapshot and returns
// the cache summary of the window; err is the first scrape failure.
func (w *metricsWindow) finish(ctx context.Context) (before, after []probes.Scrape, cache probes.CacheSummary, err error) {
	w.stopDuring()
	w.once.Do(func() { close(w.started) }) // the measured phase never began
	<-w.started
	after, err3 := w.scr.Round(context.WithoutCancel(ctx), probes.PhaseAfter)
	w.tr.CloseIdleConnections()
	return w.before, after, w.names.Summarize(w.before, after, w.during), errors.Join(w.err, err3)
}
