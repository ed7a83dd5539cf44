package report

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportContention: runs that recorded what shared their CPUs get a
// row each in report.md's CPU contention section; the one whose load
// generator's cores were busy with other work is marked and named in a
// sentence, and keeps its verdict; a sweep without the records has no
// such section (the golden report.md).
func TestReportContention(t *testing.T) {
	dir := copyTree(t, fixtureDir)
	contention := func(other float64, shared bool) func(map[string]any) {
		return func(m map[string]any) {
			m["contention"] = map[string]any{
				"sched_delay":          map[string]any{"period_ms": 10, "samples": 500, "p50_ms": 0.05, "p99_ms": 1.5, "max_ms": 12},
				"load_generator_cores": map[string]any{"cpus": "0-1", "other_pct": other, "steal_pct": 2.5, "shared_busy_cores": shared},
				"engine_hosts": []any{map[string]any{"host": "gpu1", "procs": 3, "engine_cpu_pct": 180, "cores": 16, "busy_pct": 14,
					"steal_pct": 0.5, "with_mbench": true}},
			}
		}
	}
	editSummary(t, dir, "runs/plain-r0.5/b1", contention(10, false))
	editSummary(t, dir, "runs/plain-r0.5/b2", contention(70, true))
	if _, err := Export(context.Background(), fixtureSweep(dir)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	_, sec, ok := strings.Cut(md, "## CPU contention\n")
	if !ok {
		t.Fatal("no CPU contention section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	for _, want := range []string{
		"**1 of 2 runs shared busy cores with the load generator** (plain 4096x256 rate=0.5 b2)",
		"| plain | 4096x256 | 0.5 | 1 | 1.5 / 12 | 0-1 | 10 | 2.5 | gpu1: 180% (3 procs), busy 14% / steal 0.5%, mbench 3.5% |  |",
		"| plain | 4096x256 | 0.5 | 2 | 1.5 / 12 | 0-1 | 70 | 2.5 | gpu1: 180% (3 procs), busy 14% / steal 0.5%, mbench 3.5% | shared busy cores |",
	} {
		if !strings.Contains(sec, want) {
			t.Errorf("the section lacks %q:\n%s", want, sec)
		}
	}
	if strings.Count(sec, "| plain | 4096x256 | 0.5 |") != 2 {
		t.Errorf("want a row for each of the 2 runs with records:\n%s", sec)
	}
	if !strings.Contains(md, "| plain-r0.5 | plain | 4096x256 | 0.5 | 2 | ok |") {
		t.Errorf("the marked run's verdict changed: %s", md[strings.Index(md, "## Runs\n"):])
	}
}

// TestReportBlocksEngineTokenTime: where the engine says its own time per
// output token (prefix_cache.engine_token_ms), "Per block" lists it per
// block with the row's largest over smallest — llama-server's decode time
// moving from 3.4 to 28 ms per token between blocks shows with its size.
func TestReportBlocksEngineTokenTime(t *testing.T) {
	dir := copyTree(t, fixtureDir)
	for b, ms := range map[string]float64{"b1": 3.4, "b2": 22, "b3": 28} {
		editSummary(t, dir, "runs/plain-r0.5/"+b, func(m map[string]any) {
			pc, _ := m["prefix_cache"].(map[string]any)
			if pc == nil {
				pc = map[string]any{}
			}
			pc["engine_token_ms"] = ms
			m["prefix_cache"] = pc
		})
	}
	if _, err := Export(context.Background(), fixtureSweep(dir)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "### engine_token_ms (the engine's own time per output token, from its /metrics)\n")
	sec, _, _ = strings.Cut(sec, "\n## ")
	if want := "| plain | 4096x256 | 0.5 | 3.4 | 22 | 28 | 8.235 |"; !ok || !strings.Contains(sec, want) {
		t.Errorf("per block: no engine per-token row %q:\n%s", want, sec)
	}
	if strings.Count(sec, "| 4096x256 |") != 1 {
		t.Errorf("a row for a config whose engine said nothing:\n%s", sec)
	}
}
