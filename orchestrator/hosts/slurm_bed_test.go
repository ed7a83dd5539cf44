package hosts

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/clock"
	"github.com/mbench/mbench/internal/hangguard"
	"github.com/mbench/mbench/internal/netnstest"
	"github.com/mbench/mbench/shquote"
)

// These tests run on the namespace test bed's Slurm cluster (.ci/netns-up.sh):
// its nodes are network namespaces of this machine with hostnames of their
// own, so a step's processes are on another "machine" than srun.

// bedAllocation allocates two nodes of one GPU on the bed's cluster.
func bedAllocation(t *testing.T, ctx context.Context) (*netnstest.Bed, *Slurm) {
	t.Helper()
	bed := netnstest.Require(t)
	for _, kv := range bed.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	cfg := SlurmConfig{Name: "c", JobName: "mbench-hosts-bed-" + strconv.Itoa(os.Getpid()), JobFile: filepath.Join(t.TempDir(), "job.json"),
		Steps: 2, SlurmRequest: SlurmRequest{TimeLimit: 5 * time.Minute, GPUsPerNode: 1, Nodes: 2, Partition: bed.Partition}}
	s, _, err := AllocateSlurm(ctx, NewLocal(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = bed.Slurm("scancel", s.JobID()) })
	return bed, s
}

// waitLog waits until a process's log holds want.
func waitLog(t *testing.T, ctx context.Context, p Process, want string) {
	t.Helper()
	for !strings.Contains(p.LogTail(ctx, 50), want) {
		if clock.Sleep(ctx, 20*time.Millisecond) != nil {
			t.Fatalf("log never showed %q:\n%s", want, p.LogTail(ctx, 50))
		}
	}
}

// TestBedSlurmStop: a step is stopped as a cluster stops a job: SIGTERM to
// its task, the grace for it to exit by itself, then SIGKILL. An engine
// that exits on SIGTERM does so cleanly (its last lines are written); one
// that ignores it is killed once the grace is over; a process a step left
// on its node (setsid, its parent gone: Slurm's linuxproc tracking loses
// it) is found there by its tag and killed. Complete ends the job
// COMPLETED.
func TestBedSlurmStop(t *testing.T) {
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	bed, s := bedAllocation(t, ctx)

	clean := testSpec(t, "engine-c-0", `trap 'echo mbench-got-TERM; sleep 0.3; echo mbench-clean-exit; exit 0' TERM; echo mbench-up; while :; do sleep 0.05; done`)
	clean.GPUs = 1
	p, err := s.Start(ctx, clean)
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, ctx, p, "mbench-up")
	// A day's grace: a Stop that did not see the engine exit by itself
	// would wait past the test's context.
	if err := p.Stop(ctx, 24*time.Hour); err != nil || ctx.Err() != nil {
		t.Fatalf("Stop of an engine that exits on SIGTERM: %v (context: %v)", err, ctx.Err())
	}
	logb, _ := os.ReadFile(clean.LogPath)
	log := string(logb)
	if !strings.Contains(log, "mbench-got-TERM") || !strings.Contains(log, "mbench-clean-exit") || strings.Contains(log, "Killed") {
		t.Errorf("an engine that exits on SIGTERM was not let exit cleanly:\n%s", log)
	}

	deaf := testSpec(t, "engine-c-1", `trap 'echo mbench-got-TERM' TERM; echo mbench-up; while :; do sleep 0.05; done`)
	deaf.GPUs, deaf.Node = 1, 1
	p, err = s.Start(ctx, deaf)
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, ctx, p, "mbench-up")
	nodePid, err := p.(NodeProcess).NodePid(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := bed.NetnsOf(nodePid); got != s.Nodes()[1] {
		t.Errorf("the step on node 1 runs in namespace %q, want %s", got, s.Nodes()[1])
	}
	const grace = 1500 * time.Millisecond
	t0 := time.Now()
	if err := p.Stop(ctx, grace); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took < grace {
		t.Errorf("an engine that ignores SIGTERM was killed after %v, before its grace of %v", took, grace)
	}
	if !strings.Contains(p.LogTail(ctx, 50), "mbench-got-TERM") {
		t.Errorf("the engine never got SIGTERM:\n%s", p.LogTail(ctx, 50))
	}
	if alive(nodePid) {
		t.Errorf("the step's task %d survived the stop", nodePid)
	}

	file := filepath.Join(t.TempDir(), "orphan")
	leaves := testSpec(t, "engine-c-1", `( setsid sleep 1000 & echo $! > "$0" ); echo mbench-up; exec sleep 1000`)
	leaves.Command = "sh -c " + shquote.Quote(leaves.Command) + " " + shquote.Quote(file)
	leaves.GPUs, leaves.Node = 1, 1
	p, err = s.Start(ctx, leaves)
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, ctx, p, "mbench-up")
	b, _ := os.ReadFile(file)
	orphan, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if orphan <= 0 || !alive(orphan) {
		t.Fatalf("the orphan did not start: %q", b)
	}
	t.Cleanup(func() { _ = killPid(orphan) })
	if got := bed.NetnsOf(orphan); got != s.Nodes()[1] {
		t.Errorf("the orphan runs in namespace %q, want node %s", got, s.Nodes()[1])
	}
	if err := p.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if alive(orphan) {
		t.Errorf("the process the step left on its node (%d) survived the stop", orphan)
	}
	if err := s.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	if st := bed.WaitJobState(s.JobID(), 30*time.Second, "COMPLETED"); st != "COMPLETED" {
		t.Errorf("after Complete job %s is %q, want COMPLETED", s.JobID(), st)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(s.cfg.JobFile); !os.IsNotExist(err) {
		t.Errorf("job file after Complete: %v", err)
	}
}
