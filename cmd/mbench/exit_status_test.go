package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/mbench/mbench/orchestrator"
	"github.com/urfave/cli/v2"
)

// TestFinishSweepSkipped: a sweep that printed "marked failed and skipped"
// for a cell exits 3 naming the cell, though the cell had a usable run (it
// exited 0 before); a sweep whose every cell ran exits 0.
func TestFinishSweepSkipped(t *testing.T) {
	finish := func(o *orchestrator.Outcome) error {
		var out, errOut bytes.Buffer
		app := &cli.App{Writer: &out, ErrWriter: &errOut}
		return finishSweep(cli.NewContext(app, flag.NewFlagSet("run", flag.ContinueOnError), nil), o, nil)
	}
	skipped := "c1 (taxed rate=10 s): the cell failed 3 consecutive runs: engine exited"
	err := finish(&orchestrator.Outcome{Report: "r/report.md", Skipped: []string{skipped}})
	if exitCode(err) != exitNoResult || !strings.Contains(err.Error(), "marked failed and their later runs skipped:\n  "+skipped) {
		t.Errorf("a cell given up: exit %d, %v; want %d naming it", exitCode(err), err, exitNoResult)
	}
	if err := finish(&orchestrator.Outcome{Report: "r/report.md"}); err != nil {
		t.Errorf("every cell ran: %v", err)
	}
}
