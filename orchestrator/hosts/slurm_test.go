package hosts

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/clock"
	"github.com/mbench/mbench/internal/hangguard"
	"github.com/mbench/mbench/internal/sshdtest"
	"github.com/mbench/mbench/shquote"
)

// TestSlurmArgs: the sbatch and srun lines carry the matrix's request, and
// an engine step without GPUs binds none and shares the allocation.
func TestSlurmArgs(t *testing.T) {
	c := SlurmConfig{JobName: "mbench-x", Steps: 2, SlurmRequest: SlurmRequest{TimeLimit: time.Hour, Partition: "gpu", Account: "acc", Constraint: "h100",
		GPUsPerNode: 8, CPUsPerInstance: 4, Options: []string{"--qos=high"}, StepOptions: []string{"--mem=0"}}}
	for _, tc := range []struct{ got, want string }{
		{c.SbatchCommand(), "sbatch --parsable --no-requeue --job-name=mbench-x --nodes=1 --time=1:00:00 --ntasks=2 --cpus-per-task=4 --partition=gpu --account=acc --constraint=h100 --gres=gpu:8 --output=/dev/null --qos=high " + shquote.Quote("--wrap="+holderScript)},
		{c.StepCommand("12", "n1", "engine-c-0", 4, "serve 'a b'"), `srun --jobid=12 --job-name=engine-c-0 --nodes=1 --ntasks=1 --nodelist=n1 --cpus-per-task=4 --exact --kill-on-bad-exit=1 --gres=gpu:4 --mem=0 sh -c 'serve '\''a b'\'''`},
		{c.StepCommand("12", "n1", "router-c", 0, "r"), "srun --jobid=12 --job-name=router-c --nodes=1 --ntasks=1 --nodelist=n1 --cpus-per-task=4 --exact --kill-on-bad-exit=1 --gres=none --overlap --mem=0 sh -c r"},
		{SlurmConfig{JobName: "j", SlurmRequest: SlurmRequest{TimeLimit: time.Minute}}.SbatchCommand(), "sbatch --parsable --no-requeue --job-name=j --nodes=1 --time=0:01:00 --ntasks=1 --cpus-per-task=1 --output=/dev/null " + shquote.Quote("--wrap="+holderScript)},
		{SlurmConfig{JobName: "j", Steps: 2, SlurmRequest: SlurmRequest{TimeLimit: time.Minute, Nodes: 3, GPUsPerNode: 8, Mem: "0", Exclusive: true}}.SbatchCommand(),
			"sbatch --parsable --no-requeue --job-name=j --nodes=3 --time=0:01:00 --ntasks-per-node=2 --cpus-per-task=1 --mem=0 --exclusive --gres=gpu:8 --output=/dev/null " + shquote.Quote("--wrap="+holderScript)},
		{shquote.Join(SlurmConfig{SlurmRequest: SlurmRequest{GPUsPerNode: 8}}.OverlapArgs("12", "n2", "probe-c-1")), "srun --jobid=12 --job-name=probe-c-1 --nodes=1 --ntasks=1 --nodelist=n2 --overlap --gres=gpu:8"},
	} {
		if tc.got != tc.want {
			t.Errorf("got  %s\nwant %s", tc.got, tc.want)
		}
	}
}

// TestSlurmSteps runs against the real Slurm of .ci/slurm-up.sh: two
// processes started as steps get distinct GPUs from Slurm; Stop cancels a
// step and squeue no longer lists it; a second AllocateSlurm of the same
// record reuses the allocation and cancels the step left in it; Close
// cancels the allocation and forgets it.
func TestSlurmSteps(t *testing.T) {
	if out, err := exec.Command("sinfo", "-h", "-o", "%G").CombinedOutput(); err != nil || !strings.Contains(string(out), "gpu:") {
		if os.Getenv("MBENCH_REQUIRE_SLURM") == "1" {
			t.Fatalf("MBENCH_REQUIRE_SLURM=1 but sinfo: %v %s", err, out)
		}
		t.Skipf("no Slurm with GPUs here (run .ci/slurm-up.sh): %v %s", err, out)
	}
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	dir := t.TempDir()
	cfg := SlurmConfig{Name: "c", JobName: "mbench-hosts-test-" + strconv.Itoa(os.Getpid()), JobFile: filepath.Join(dir, "job.json"),
		Steps: 2, SlurmRequest: SlurmRequest{TimeLimit: 5 * time.Minute, GPUsPerNode: 2}}
	s, reused, err := AllocateSlurm(ctx, NewLocal(), cfg)
	if err != nil || reused {
		t.Fatalf("allocate: %v (reused %v)", err, reused)
	}
	t.Cleanup(func() { _ = exec.Command("scancel", s.JobID()).Run() })
	var procs []Process
	for i := range 2 {
		spec := testSpec(t, "engine-c-"+strconv.Itoa(i), "echo gpus=$CUDA_VISIBLE_DEVICES; exec sleep 300")
		spec.GPUs = 1
		p, err := s.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	gpus := map[string]bool{}
	re := regexp.MustCompile(`gpus=(\S+)`)
	for i, p := range procs {
		m := re.FindStringSubmatch(p.LogTail(ctx, 5))
		for ; m == nil; m = re.FindStringSubmatch(p.LogTail(ctx, 5)) {
			if err := clock.Sleep(ctx, 20*time.Millisecond); err != nil {
				t.Fatalf("step %d printed no GPUs: %s", i, p.LogTail(ctx, 5))
			}
		}
		gpus[m[1]] = true
	}
	// Slurm numbers the GPUs of the node (CUDA_VISIBLE_DEVICES holds the
	// node's indices where no cgroup renumbers them); other jobs on the
	// test node may hold 0 and 1.
	all := allocGPUs(t, s.JobID())
	if len(gpus) != 2 || strings.Join(slices.Sorted(maps.Keys(gpus)), ",") != all {
		t.Errorf("steps saw GPUs %v, want one each of the allocation's %s", gpus, all)
	}
	// The one node is this machine: the pid each step recorded is its
	// command's, a process group leader on the node.
	for i, p := range procs {
		pid, err := p.(NodeProcess).NodePid(ctx)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid || !strings.Contains(string(cmdline), "sleep") {
			t.Errorf("step %d: node pid %d is %q, pgid %d (%v); want the step's sleep, its own group", i, pid, cmdline, pgid, err)
		}
	}
	// A probe step shares every GPU of the allocation with the engine
	// steps that hold them all.
	pr, err := s.StartOnNode(ctx, testSpec(t, "probe-c", "echo probe-gpus=$CUDA_VISIBLE_DEVICES; exec sleep 300"))
	if err != nil {
		t.Fatal(err)
	}
	probeRE := regexp.MustCompile(`probe-gpus=(\S+)`)
	for m := probeRE.FindStringSubmatch(pr.LogTail(ctx, 5)); m == nil || m[1] != all; m = probeRE.FindStringSubmatch(pr.LogTail(ctx, 5)) {
		if m != nil || clock.Sleep(ctx, 20*time.Millisecond) != nil {
			t.Fatalf("probe step saw GPUs %q, want the allocation's %s: %s", m, all, pr.LogTail(ctx, 5))
		}
	}
	if out, _, err := s.RunOnNodeGPUs(ctx, 0, "gate-c", "echo $CUDA_VISIBLE_DEVICES"); err != nil || LastLine(out) != all {
		t.Errorf("a gate read step saw GPUs %q (%v), want the allocation's %s", out, err, all)
	}
	if err := pr.Stop(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if left, err := s.steps(ctx, "probe-c"); err != nil || len(left) > 0 {
		t.Errorf("after Stop of the probe squeue lists %v (%v)", left, err)
	}
	if err := procs[0].Stop(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if left, err := s.steps(ctx, "engine-c-0"); err != nil || len(left) > 0 {
		t.Errorf("after Stop squeue lists %v (%v)", left, err)
	}
	if left, _ := s.steps(ctx, "engine-c-1"); len(left) != 1 {
		t.Errorf("the other step: squeue lists %v, want it running", left)
	}
	again, reused, err := AllocateSlurm(ctx, NewLocal(), cfg)
	if err != nil || !reused || again.JobID() != s.JobID() {
		t.Fatalf("second allocate: job %v reused %v err %v, want job %s reused", again, reused, err, s.JobID())
	}
	if left, _ := s.steps(ctx, ""); len(left) > 0 {
		t.Errorf("a reused allocation still has steps %v", left)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.query(ctx, s.JobID()); j.state != "CANCELLED" && j.state != "" {
		t.Errorf("after Close job %s is %s", s.JobID(), j.state)
	}
	if _, err := os.Stat(cfg.JobFile); !os.IsNotExist(err) {
		t.Errorf("job file after Close: %v", err)
	}
	if _, err := s.Start(ctx, testSpec(t, "late", "true")); !errors.Is(err, ErrAllocationEnded) {
		t.Errorf("Start after the allocation ended: %v, want ErrAllocationEnded", err)
	}
}

// TestSlurmOverSSH: the login machine is reached through a real sshd on
// loopback, and salloc, srun (an engine step and a GPU-seeing --overlap
// read), squeue and scancel all run through it.
func TestSlurmOverSSH(t *testing.T) {
	if out, err := exec.Command("sinfo", "-h", "-o", "%G").CombinedOutput(); err != nil || !strings.Contains(string(out), "gpu:") {
		if os.Getenv("MBENCH_REQUIRE_SLURM") == "1" {
			t.Fatalf("MBENCH_REQUIRE_SLURM=1 but sinfo: %v %s", err, out)
		}
		t.Skipf("no Slurm with GPUs here (run .ci/slurm-up.sh): %v %s", err, out)
	}
	srv := sshdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	login, err := DialSSH(ctx, testConfig(srv, nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg := SlurmConfig{Name: "c", JobName: "mbench-hosts-ssh-" + strconv.Itoa(os.Getpid()), JobFile: filepath.Join(t.TempDir(), "job.json"),
		Steps: 1, SlurmRequest: SlurmRequest{TimeLimit: 5 * time.Minute, GPUsPerNode: 2}}
	s, _, err := AllocateSlurm(ctx, login, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("scancel", s.JobID()).Run() })
	spec := testSpec(t, "engine-c-0", "exec sleep 300")
	spec.GPUs = 1
	p, err := s.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := p.(NodeProcess).NodePid(ctx); err != nil; _, err = p.(NodeProcess).NodePid(ctx) {
		if clock.Sleep(ctx, 20*time.Millisecond) != nil {
			t.Fatalf("the step's node pid never came through the login machine: %v", err)
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	out, stderr, err := s.RunOnNodeGPUs(rctx, 0, "gate-c", "echo $CUDA_VISIBLE_DEVICES")
	rcancel()
	if all := allocGPUs(t, s.JobID()); err != nil || LastLine(out) != all {
		t.Errorf("a GPU read step over ssh: %q %q %v, want the allocation's %s", out, stderr, err, all)
	}
	if err := p.Stop(ctx, 2*time.Second); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSlurmTimeLeft: squeue's time left (%L) says when a job has reached its
// limit, whatever the zones of the cluster and of mbench: 0:00 at the limit,
// INVALID past it (as Slurm 22.05 prints while the job is still RUNNING).
func TestSlurmTimeLeft(t *testing.T) {
	for _, tc := range []struct {
		left string
		want bool
	}{
		{"0:00", true},
		{"INVALID", true},
		{"0:01", false},
		{"59:59", false},
		{"1:00:00", false},
		{"2-00:00:00", false},
		{"UNLIMITED", false},
		{"NOT_SET", false},
		{"", false},
	} {
		if got := noTimeLeft(tc.left); got != tc.want {
			t.Errorf("noTimeLeft(%q) = %v, want %v", tc.left, got, tc.want)
		}
	}
	for in, want := range map[string]time.Duration{"4:59": 299 * time.Second, "1:02:03": time.Hour + 2*time.Minute + 3*time.Second, "1-00:00:01": 24*time.Hour + time.Second} {
		if got, ok := parseSlurmDuration(in); !ok || got != want {
			t.Errorf("parseSlurmDuration(%q) = %v %v, want %v", in, got, ok, want)
		}
	}
}

// allocGPUs is the node's GPU indices of a job's allocation as Slurm
// records them (scontrol show job -d: "GRES=gpu:2(IDX:2-3)"), written as
// CUDA_VISIBLE_DEVICES lists them: "2,3".
func allocGPUs(t *testing.T, job string) string {
	t.Helper()
	out, err := exec.Command("scontrol", "show", "job", "-d", job).CombinedOutput()
	m := regexp.MustCompile(`GRES=gpu[^(]*\(IDX:([0-9,-]+)\)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("scontrol show job -d %s: %v\n%s", job, err, out)
	}
	var idx []string
	for _, part := range strings.Split(string(m[1]), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || b < a {
			t.Fatalf("job %s: GPU indices %q", job, m[1])
		}
		for i := a; i <= b; i++ {
			idx = append(idx, strconv.Itoa(i))
		}
	}
	return strings.Join(idx, ",")
}

// TestSlurmTime: durations become Slurm's -t format, rounded up to minutes.
func TestSlurmTime(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{time.Minute, "0:01:00"}, {90 * time.Second, "0:02:00"}, {2 * time.Hour, "2:00:00"}, {49 * time.Hour, "2-01:00:00"}} {
		if got := SlurmTime(tc.d); got != tc.want {
			t.Errorf("SlurmTime(%s) = %s, want %s", tc.d, got, tc.want)
		}
	}
}
