package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/results"
)

// TestLoopHostLost: host b stops answering during taxed's run of block 2.
// That run is journaled host_lost (no failure: with a fail limit of 1 the
// cell is not given up), so is every later run of the block that needs b
// (slow), without being tried; plain, on host a, runs through the block;
// then the sweep stops, naming the host, before block 3. mbench status
// counts the host_lost runs. Resume runs them first, in the block's order,
// then the rest of the sweep; the report has every run once and no
// host_lost one.
func TestLoopHostLost(t *testing.T) {
	out := t.TempDir() + "/out"
	lost := &hosts.UnreachableError{Host: "b", Err: fmt.Errorf("host b: %w: dial tcp: i/o timeout (gave up after 5 attempts)", hosts.ErrHostUnreachable)}
	first := &scripted{script: func(r run) (float64, results.Verdict, error) {
		if r.block == 2 && r.cell.Config == "taxed" {
			return 0, "", fmt.Errorf("load: connection reset: %w", lost)
		}
		return allOK(r)
	}}
	opts := loopOpts(out, first)
	opts.FailLimit = 1
	_, err := Run(context.Background(), "testdata/hostlost.yaml", opts)
	if !errors.Is(err, hosts.ErrHostUnreachable) || !strings.Contains(err.Error(), "host b stopped answering in block 2") ||
		!strings.Contains(err.Error(), "journaled host_lost") || !strings.Contains(err.Error(), "mbench resume") {
		t.Fatalf("sweep with a lost host: %v; want it stopped after block 2, naming host b and the resume", err)
	}
	planned := plannedOrder(t, out)
	config := map[string]string{}
	for _, c := range []string{"plain", "taxed", "slow"} {
		config[cellID(t, out, c)] = c
	}
	status := map[string]results.Verdict{}
	for _, e := range journalOf(t, out) {
		status[fmt.Sprintf("%s/b%d", e.Cell, e.Block)] = e.Status
	}
	var wantLost []string
	after := false // past taxed's run in block 2
	for _, k := range planned {
		cell, block, _ := strings.Cut(k, "/")
		measured := slices.Contains(first.runs, k)
		after = after || block == "b2" && config[cell] == "taxed"
		switch {
		case block == "b2" && after && config[cell] != "plain":
			if status[k] != results.VerdictHostLost || measured != (config[cell] == "taxed") {
				t.Errorf("%s (%s): measured %v, journaled %q; want host_lost, measured only for the run the loss cut short", k, config[cell], measured, status[k])
			}
			wantLost = append(wantLost, k)
		case block == "b1" || block == "b2":
			if !measured || status[k] != results.VerdictOK {
				t.Errorf("%s (%s): measured %v, journaled %q; want it run ok", k, config[cell], measured, status[k])
			}
		default:
			if measured || status[k] != "" {
				t.Errorf("%s ran after the sweep should have stopped (journaled %q)", k, status[k])
			}
		}
	}
	if len(planned) != 6 || len(wantLost) != 2 {
		t.Fatalf("planned %v, host_lost %v: want blocks 1 and 2 of 3 cells, slow after taxed in block 2 (seed 11), so that a run is journaled host_lost untried", planned, wantLost)
	}
	st, err := ReadStatus(out)
	if err != nil || st.Runs[results.VerdictHostLost] != len(wantLost) || st.Complete != 1 {
		t.Errorf("status: runs %v, %d blocks complete (%v); want %d host_lost and block 1 complete", st.Runs, st.Complete, err, len(wantLost))
	}

	second := &scripted{script: allOK}
	o, err := Resume(context.Background(), out, loopOpts(out, second))
	if err != nil {
		t.Fatalf("resume once the host answers: %v", err)
	}
	planned = plannedOrder(t, out)
	if len(second.runs) < len(wantLost) || !slices.Equal(second.runs[:len(wantLost)], wantLost) {
		t.Errorf("resume measured %v; want the host_lost runs %v first", second.runs, wantLost)
	}
	idx := journalIndex(journalOf(t, out))
	for _, k := range planned {
		cell, block, _ := strings.Cut(k, "/")
		var b int
		fmt.Sscanf(block, "b%d", &b)
		if e, ok := idx[runKey{cell, b}]; !ok || e.Status != results.VerdictOK {
			t.Errorf("after resume %s: %+v; want ok", k, e)
		}
	}
	if len(planned) != 12 || o.Verdicts.Total() != 12 || o.Verdicts[results.VerdictOK] != 12 || len(o.Unusable) != 0 {
		t.Errorf("after resume: %d planned, outcome verdicts %v, unusable %v; want 12 ok runs", len(planned), o.Verdicts, o.Unusable)
	}
	if st, err := ReadStatus(out); err != nil || st.Runs[results.VerdictHostLost] != 0 || st.Runs.Total() != 12 {
		t.Errorf("status after resume: %v (%v); want 12 runs, no host_lost left", st.Runs, err)
	}
}
