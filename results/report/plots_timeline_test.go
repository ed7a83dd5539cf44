package report

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/openloop"
)

// TestTimelineOfARunThatIsNotAResult: every run that is not a result gets
// a timeline in plots/, drawn from its requests.jsonl (each TTFT at its
// send, the failed requests, the requests in flight) and its step log (the
// engine's queue), and report.md's line for the run links it; a run that
// is a result gets none.
func TestTimelineOfARunThatIsNotAResult(t *testing.T) {
	dir := copyTree(t, fixtureDir)
	run := filepath.Join(dir, "runs", "noop-r2", "b1") // saturated in the fixture
	writeRequests(t, run)
	writeRequests(t, filepath.Join(dir, "runs", "plain-r0.5", "b1")) // a result
	steps, err := os.ReadFile(filepath.Join(run, "engine_step.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	steps = []byte(strings.ReplaceAll(string(steps), `"step_duration_us"`, `"num_waiting":3,"step_duration_us"`))
	if err := os.WriteFile(filepath.Join(run, "engine_step.jsonl"), steps, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Export(context.Background(), fixtureSweep(dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Warnings) != 0 {
		t.Errorf("warnings: %v", rep.Warnings)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "plots", "timeline_noop-r2_b1.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Run noop-r2 b1 (noop_connector, rate=2, 4096x256): saturated", "TTFT of each request, at its send",
		"failed (1), at its end", "in flight (sent, not ended)", "engine queue (num_waiting"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("the timeline lacks %q", want)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !strings.Contains(string(md), "run noop-r2 b1: **saturated** — TTFT rising ([timeline](plots/timeline_noop-r2_b1.svg))") {
		t.Error("report.md does not link the run's timeline")
	}
	if _, err := os.Stat(filepath.Join(dir, "plots", "timeline_plain-r2_b1.svg")); err == nil {
		t.Error("a timeline drawn for a run that is a result")
	}
	// The per-request CDFs pool the measured requests of the runs that are
	// results: plain's one run with requests, not noop's saturated one.
	for _, m := range []string{"ttft", "tpot"} {
		cdf, err := os.ReadFile(filepath.Join(dir, "plots", "request_"+m+"_cdf.svg"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(cdf), "plain @ rate=0.5 (39 requests)") || strings.Contains(string(cdf), "noop_connector") {
			t.Errorf("the %s CDF does not hold plain's 39 ok requests alone", m)
		}
	}
}

// writeRequests writes a requests.jsonl of 40 measured requests, one
// apart every 0.5 s with a TTFT growing by 20 ms each, the 31st failed.
func writeRequests(t *testing.T, run string) {
	t.Helper()
	var b strings.Builder
	for i := range 40 {
		r := openloop.Record{ID: i, Cell: "noop-r2", Block: 1, Phase: openloop.PhaseMeasure, ScheduledNs: int64(i) * 5e8, SentNs: int64(i)*5e8 + 1e5,
			FirstTokenNs: int64(i)*5e8 + int64(i+1)*2e7, LastTokenNs: int64(i)*5e8 + 2e9, DoneNs: int64(i)*5e8 + 2e9, OutputTokens: 8, Status: openloop.StatusOK}
		if i == 30 {
			r.Status, r.Error, r.ErrorClass, r.FirstTokenNs, r.LastTokenNs = openloop.StatusError, "timeout", openloop.ErrorClass("timeout"), 0, 0
		}
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(filepath.Join(run, "requests.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
