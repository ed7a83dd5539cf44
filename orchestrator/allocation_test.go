package orchestrator

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mbench/mbench/orchestrator/hosts"
)

// TestAllocationEndedFirst: a run that failed because its Slurm allocation
// ended says so on its first line, before the run's own error and the log
// lines that error quotes (the cause came after five lines of log tail,
// as ": slurm allocation ended …").
func TestAllocationEndedFirst(t *testing.T) {
	ended := fmt.Errorf("%w: job 41 (mbench-x) on mbn-n2 is NODE_FAIL; `mbench resume` asks for a new one", hosts.ErrAllocationEnded)
	runErr := errors.New("engine-gpu-0 on host gpu exited during the run; its log ends:\n  l1\n  l2\n  l3\n  l4\n  l5")
	err := fmt.Errorf("run c1 b2: %w", allocationEnded(ended, runErr))
	lines := strings.Split(err.Error(), "\n")
	if !errors.Is(err, hosts.ErrAllocationEnded) || !strings.HasPrefix(lines[0], "run c1 b2: slurm allocation ended: job 41") ||
		lines[1] != "the run failed with it: engine-gpu-0 on host gpu exited during the run; its log ends:" || lines[len(lines)-1] != "    l5" {
		t.Errorf("allocation ended:\n%s\nwant the allocation's end on the first line, then the run's error", err)
	}
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), ":") {
			t.Errorf("a line starts with a colon: %q", l)
		}
	}
}
