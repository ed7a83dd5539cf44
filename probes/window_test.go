package probes

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop"
)

// TestWindow: the "before" snapshot is taken inside OnPhase (before
// the first measured request could leave), never for the warm-up, and the
// window's prefix-cache figures are the deltas between before and after.
func TestWindow(t *testing.T) {
	var queries, hits atomic.Int64
	var scrapes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scrapes.Add(1)
		fmt.Fprintf(w, "# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total %d\n# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total %d\n", queries.Load(), hits.Load())
	}))
	defer srv.Close()
	queries.Store(1000) // the fill and warm-up's
	hits.Store(100)
	var sink bytes.Buffer
	ctx := context.Background()
	w := NewWindow(ctx, &Scraper{Client: srv.Client(), Targets: []string{srv.URL}, Interval: time.Hour, Sink: &sink}, VLLMMetrics)
	w.OnPhase(ctx, openloop.PhaseWarmup)
	if scrapes.Load() != 0 {
		t.Fatal("scraped for the warm-up phase")
	}
	w.OnPhase(ctx, openloop.PhaseMeasure)
	if scrapes.Load() < 1 {
		t.Fatal(`OnPhase returned before the "before" snapshot`)
	}
	w.OnPhase(ctx, openloop.PhaseMeasure) // once only
	queries.Add(400)                      // the measured requests
	hits.Add(300)
	_, _, cache, opened, err := w.Close(ctx)
	if err != nil || !opened {
		t.Fatal(err, opened)
	}
	if cache.Queries != 400 || cache.Hits != 300 || !cache.HitRateValid || cache.HitRate != 0.75 {
		t.Errorf("window cache %+v, want 400 queries, 300 hits, 0.75", cache)
	}
	if !bytes.Contains(sink.Bytes(), []byte(`"before"`)) || !bytes.Contains(sink.Bytes(), []byte(`"after"`)) {
		t.Errorf("metrics.jsonl lacks the before/after scrapes:\n%s", sink.String())
	}
}

// TestWindowNeverOpened: a run whose measured phase never began has no
// window (opened false), and Close still returns.
func TestWindowNeverOpened(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "vllm:prefix_cache_queries_total 1\n")
	}))
	defer srv.Close()
	w := NewWindow(context.Background(), &Scraper{Client: srv.Client(), Targets: []string{srv.URL}, Interval: time.Hour}, VLLMMetrics)
	w.OnPhase(context.Background(), openloop.PhaseWarmup)
	if before, _, _, opened, _ := w.Close(context.Background()); opened || len(before) != 0 {
		t.Errorf("opened %v with %d before-scrapes, for a run that never measured", opened, len(before))
	}
}
