package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Slurm tests run sim sweeps through a real Slurm (.ci/slurm-up.sh
// starts a one-node cluster with 8 GPUs declared as generic resources).
// They skip where sinfo does not answer, unless MBENCH_REQUIRE_SLURM=1.
// The sweeps run in parallel: each is a job of its own holding 2 of the
// node's 8 GPUs, its engines on a port block of its own, and every check
// names its job.

func requireSlurm(t *testing.T) {
	t.Helper()
	out, err := exec.Command("sinfo", "-h", "-o", "%t %G").CombinedOutput()
	if err == nil && strings.Contains(string(out), "gpu:") {
		return
	}
	if os.Getenv("MBENCH_REQUIRE_SLURM") == "1" {
		t.Fatalf("MBENCH_REQUIRE_SLURM=1 but Slurm does not answer (run .ci/slurm-up.sh): sinfo: %v %s", err, out)
	}
	t.Skipf("no Slurm cluster with GPUs here (sinfo: %v %s); .ci/slurm-up.sh starts one", err, out)
}

// slurmEngine goes into simMatrix after the engine section: a slurm host
// with two instances of one GPU each, every run on fresh engines (so steps
// come and go); each engine step prints the CUDA_VISIBLE_DEVICES Slurm
// gave it before it starts.
const slurmEngine = `  restart: every_run
  command: "sh -c 'echo mbench-test-gpus=$CUDA_VISIBLE_DEVICES; exec \"$0\" \"$@\"' {{.Self}} sim --addr {{.Bind}}:{{.Port}} --step-log {{.StepLog}} --model {{.Model}} {{.ConfigArgs}}"
hosts:
  cluster:
    slurm: {time_limit: 10m, gpus_per_node: 2}
`

func writeSlurmMatrix(t *testing.T, dir, name, blocks string) string {
	t.Helper()
	p := filepath.Join(dir, "m.yaml")
	writeSimMatrix(t, p, map[string]string{"%NAME%": name, "%ENV%": slurmEngine, "%BLOCKS%": blocks, "%RATES%": "40",
		"%CONFIGS%": "  plain: {topology: {instances_per_host: 2, gpus_per_instance: 1}}"})
	// The gate stays on: it reads the node through job steps (no NVML
	// here, so it says the node is not covered and the sweep goes on).
	b, _ := os.ReadFile(p)
	writeTestFile(t, p, []byte(strings.Replace(string(b), "gate: {enabled: false}", "gate: {enabled: true, timeout: 5s}", 1)))
	return p
}

// startSlurmSweep starts `mbench run` of a slurm sweep of blocks runs and
// waits until it has journaled one.
func startSlurmSweep(t *testing.T, name, blocks string) (c *mbenchChild, dir, out string) {
	t.Helper()
	dir = t.TempDir()
	m := writeSlurmMatrix(t, dir, name, blocks)
	out = filepath.Join(dir, "out")
	c = startMbench(t, dir, "run", m, "--out", out, "--quiet")
	return c, dir, out
}

// waitJournaled waits until the sweep has journaled a run.
func waitJournaled(t *testing.T, c *mbenchChild, out string) {
	t.Helper()
	if !waitChild(c, 90*time.Second, func() bool { return len(journaledDirs(out)) >= 1 }) {
		c.kill()
		log, _ := os.ReadFile(filepath.Join(out, "mbench.log"))
		t.Fatalf("no run journaled:\n%s\nmbench.log:\n%s", c.output(), log)
	}
}

// slurmJob is the allocation a sweep recorded (slurm-cluster.json).
func slurmJob(out string) string {
	var rec struct {
		JobID string `json:"job_id"`
	}
	b, _ := os.ReadFile(filepath.Join(out, "slurm-cluster.json"))
	_ = json.Unmarshal(b, &rec)
	return rec.JobID
}

// squeue runs squeue with args and returns its lines.
func squeue(t *testing.T, args ...string) []string {
	t.Helper()
	return squeueIn(nil, args...)
}

// squeueIn is squeue in the environment env puts over the test process's
// (overEnv): the bed's cluster for its SLURM_CONF.
func squeueIn(env []string, args ...string) []string {
	cmd := exec.Command("squeue", append([]string{"-h"}, args...)...)
	cmd.Env = overEnv(os.Environ(), env)
	out, err := cmd.Output()
	if err != nil {
		return nil // a purged job: Slurm no longer lists it
	}
	return strings.Fields(strings.TrimSpace(string(out)))
}

// jobState is the job's state as squeue reports it ("" once purged).
func jobState(t *testing.T, job string) string { return jobStateIn(nil, job) }

// jobStateIn is jobState in env (squeueIn).
func jobStateIn(env []string, job string) string {
	s := squeueIn(env, "-t", "all", "-j", job, "-o", "%T")
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// watchSteps polls squeue for the engine steps of job while a sweep runs
// and records the most listed at once; stop ends it.
func watchSteps(t *testing.T, job func() string) (most func() int, stop func()) {
	var mu sync.Mutex
	n := 0
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			j := job()
			if j == "" {
				continue
			}
			k := 0
			for _, name := range squeue(t, "-s", "-j", j, "-o", "%j") {
				if strings.HasPrefix(name, "engine-") {
					k++
				}
			}
			mu.Lock()
			n = max(n, k)
			mu.Unlock()
		}
	}()
	return func() int { mu.Lock(); defer mu.Unlock(); return n }, func() { close(done); wg.Wait() }
}

var journalNodeRE = regexp.MustCompile(`^cluster: slurm job ([0-9]+) node \S+ \(cluster mbench\)$`)

// journalJobs returns the slurm job each journaled run names.
func journalJobs(t *testing.T, out string) []string {
	t.Helper()
	var jobs []string
	for i, r := range readJSONLStrict(t, filepath.Join(out, "journal.jsonl")) {
		nodes, _ := r["nodes"].([]any)
		if len(nodes) != 1 {
			t.Fatalf("journal line %d: nodes %v, want one slurm node", i+1, r["nodes"])
		}
		m := journalNodeRE.FindStringSubmatch(nodes[0].(string))
		if m == nil {
			t.Fatalf("journal line %d: nodes %q", i+1, nodes[0])
		}
		jobs = append(jobs, m[1])
	}
	return jobs
}

// checkSlurmTeardown: after mbench exits, its allocation is cancelled, no
// step of it is listed, and the record is gone.
func checkSlurmTeardown(t *testing.T, out, job string) {
	t.Helper()
	if st := jobState(t, job); st == "RUNNING" || st == "PENDING" || st == "COMPLETING" {
		t.Errorf("slurm job %s is %s after mbench exited", job, st)
	}
	if steps := squeue(t, "-s", "-j", job, "-o", "%i"); len(steps) > 0 {
		t.Errorf("steps of job %s still listed after mbench exited: %v", job, steps)
	}
	if _, err := os.Stat(filepath.Join(out, "slurm-cluster.json")); !os.IsNotExist(err) {
		t.Errorf("slurm-cluster.json still there after a clean exit: %v", err)
	}
}

// oneGPUEach: the engine steps of the allocation's two instances saw two
// distinct single GPUs (the node's indices: another job on the test node
// may hold 0 and 1).
func oneGPUEach(gpus map[string]bool) bool {
	for g := range gpus {
		if _, err := strconv.Atoi(g); err != nil {
			return false
		}
	}
	return len(gpus) == 2
}

// engineGPUs returns the CUDA_VISIBLE_DEVICES each engine step printed in
// its log under the sweep's state directory.
func engineGPUs(t *testing.T, state string) map[string]bool {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(state, "logs", "engine-*.log"))
	seen := map[string]bool{}
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		for _, m := range regexp.MustCompile(`mbench-test-gpus=(\S*)`).FindAllStringSubmatch(string(b), -1) {
			seen[m[1]] = true
		}
	}
	return seen
}

// killAndResume kills the sweep c with SIGKILL once it has journaled a run,
// checks that the allocation it recorded outlives it, resumes the sweep in
// out (in c's environment), waits up to limit for the resume to finish and checks that it
// reused that allocation; it returns the allocation's job id.
func killAndResume(t *testing.T, c *mbenchChild, dir, out string, limit time.Duration) string {
	t.Helper()
	waitJournaled(t, c, out)
	c.kill()
	job := slurmJob(out)
	if job == "" || jobStateIn(c.env, job) != "RUNNING" {
		t.Fatalf("after kill -9 the recorded allocation %q is %q, want RUNNING:\n%s", job, jobStateIn(c.env, job), c.output())
	}
	r := startMbenchEnv(t, dir, c.env, "resume", out)
	mustFinish(t, r, limit)
	if !strings.Contains(r.output(), "reusing slurm job "+job) {
		t.Errorf("resume did not reuse allocation %s:\n%s", job, r.output())
	}
	return job
}

// TestSlurmSweepKill9Resume runs a sim sweep through Slurm: one allocation,
// two engine steps per run each bound to its own GPU by Slurm, steps
// cancelled between runs (never more than two listed); mbench is killed
// with SIGKILL mid-sweep, the allocation outlives it, and resume reuses it,
// finishes, and cancels it.
func TestSlurmSweepKill9Resume(t *testing.T) {
	t.Parallel()
	requireSlurm(t)
	c, dir, out := startSlurmSweep(t, "slurm-kill9", "4")
	most, stop := watchSteps(t, func() string { return slurmJob(out) })
	job := killAndResume(t, c, dir, out, 120*time.Second)
	stop()
	jobs := journalJobs(t, out)
	if len(jobs) != 4 {
		t.Fatalf("%d runs journaled, want 4", len(jobs))
	}
	for i, j := range jobs {
		if j != job {
			t.Errorf("run %d ran in slurm job %s, want %s (the one allocation)", i+1, j, job)
		}
	}
	if n := most(); n < 1 || n > 2 {
		t.Errorf("at most %d engine steps listed at once, want 1..2 (two instances, each cancelled before the next run)", n)
	}
	gpus := engineGPUs(t, filepath.Join(out, ".state"))
	if !oneGPUEach(gpus) {
		t.Errorf("engine steps saw CUDA_VISIBLE_DEVICES %v, want two GPUs of the node, one each (set by Slurm)", slices.Sorted(func(yield func(string) bool) {
			for g := range gpus {
				if !yield(g) {
					return
				}
			}
		}))
	}
	checkSlurmProbes(t, out, 4)
	checkSlurmTeardown(t, out, job)
}

// checkSlurmProbes: every journaled run has host samples that a probe step
// on the node wrote (host "cluster", not this machine's "local"), and the
// sweep says why the node has no GPU samples and no gate (no NVML here).
func checkSlurmProbes(t *testing.T, out string, runs int) {
	t.Helper()
	dirs := journaledDirs(out)
	if len(dirs) != runs {
		t.Fatalf("%d run directories journaled, want %d", len(dirs), runs)
	}
	for d := range dirs {
		d = filepath.Join(out, d)
		n := 0
		for _, r := range readJSONLStrict(t, filepath.Join(d, "host.jsonl")) {
			if r["host"] == "cluster" {
				n++
			}
		}
		if n == 0 {
			logs, _ := filepath.Glob(filepath.Join(out, ".state", "probes", "*"))
			var b strings.Builder
			for _, l := range logs {
				c, _ := os.ReadFile(l)
				fmt.Fprintf(&b, "%s: %.300s\n", l, c)
			}
			ml, _ := os.ReadFile(filepath.Join(out, "mbench.log"))
			t.Errorf("%s: no host sample from the node's probe step\n%s\n%s", d, &b, ml)
		}
		var sum struct {
			Gate struct{ Note string } `json:"gate"`
		}
		b, _ := os.ReadFile(filepath.Join(d, "summary_A.json"))
		if err := json.Unmarshal(b, &sum); err != nil || sum.Gate.Note != "gpu unavailable or gate disabled" {
			t.Errorf("%s: gate note %q (%v), want the gate off for want of GPU samples", d, sum.Gate.Note, err)
		}
	}
	log, _ := os.ReadFile(filepath.Join(out, "mbench.log"))
	for _, want := range []string{"host cluster: probe: NVML unavailable", "host cluster: read the GPUs of node ", "the GPU gate does not cover this node"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("sweep.log lacks %q:\n%s", want, log)
		}
	}
}

// TestSlurmAllocationEnds: the allocation is cancelled under a running
// sweep (as a time limit would end it); mbench stops with an error that
// says so, journals no failed run for the lost one, and resume finishes the
// sweep in a new allocation.
func TestSlurmAllocationEnds(t *testing.T) {
	t.Parallel()
	requireSlurm(t)
	c, dir, out := startSlurmSweep(t, "slurm-ends", "3")
	waitJournaled(t, c, out)
	job := slurmJob(out)
	if err := exec.Command("scancel", job).Run(); err != nil {
		t.Fatal(err)
	}
	code := c.wait(90 * time.Second)
	if code == 0 || code == -1 {
		c.kill()
		t.Fatalf("mbench exit %d after its allocation was cancelled, want a failure:\n%s", code, c.output())
	}
	if o := c.output(); !strings.Contains(o, "slurm allocation ended") || !strings.Contains(o, "job "+job) || !strings.Contains(o, "mbench resume") {
		t.Errorf("the error does not say the allocation %s ended and how to go on:\n%s", job, o)
	}
	for i, r := range readJSONLStrict(t, filepath.Join(out, "journal.jsonl")) {
		if r["status"] == "failed" {
			t.Errorf("journal line %d: %v %v: a run lost with the allocation was journaled", i+1, r["status"], r["reason"])
		}
	}
	r := startMbench(t, dir, "resume", out)
	mustFinish(t, r, 120*time.Second)
	jobs := journalJobs(t, out)
	if len(jobs) != 3 || jobs[0] != job || jobs[2] == job {
		t.Errorf("runs ran in jobs %v; want the first in %s and the last in a new allocation", jobs, job)
	}
	if !strings.Contains(r.output(), "allocated slurm job "+jobs[2]) {
		t.Errorf("resume did not say it got allocation %s:\n%s", jobs[2], r.output())
	}
	checkSlurmTeardown(t, out, jobs[2])
}

// slurmDryRun runs `mbench run --dry-run` of matrix m, checks that its
// output holds every line part of wants, and returns it.
func slurmDryRun(t *testing.T, m, out string, wants ...string) string {
	t.Helper()
	stdout, stderr, err := runCLI(t, t.Context(), "run", "--dry-run", m, "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range wants {
		if !strings.Contains(stdout, want) {
			t.Errorf("dry run lacks %q:\n%s", want, stdout)
		}
	}
	return stdout
}

// TestSlurmDryRun: --dry-run prints the exact sbatch line and each engine's
// srun line, with the GPUs Slurm is asked to bind; it needs no Slurm.
func TestSlurmDryRun(t *testing.T) {
	dir := t.TempDir()
	m := writeSlurmMatrix(t, dir, "slurm-dry", "2")
	out := filepath.Join(dir, "out")
	stdout := slurmDryRun(t, m, out,
		"#   $ sbatch --parsable --no-requeue --job-name=mbench-slurm-dry-",
		" --nodes=1 --time=0:10:00 --ntasks=2 --cpus-per-task=1 --gres=gpu:2 --output=/dev/null '--wrap=trap ",
		"recorded in "+filepath.Join(out, "slurm-cluster.json"),
		"srun '--jobid=<job id>' --job-name=engine-cluster-0 --nodes=1 --ntasks=1 '--nodelist=<node>' --cpus-per-task=1 --exact --kill-on-bad-exit=1 --gres=gpu:1 sh -c ",
		"--job-name=engine-cluster-1 ",
	)
	if strings.Contains(stdout, "CUDA_VISIBLE_DEVICES=") {
		t.Errorf("dry run sets CUDA_VISIBLE_DEVICES on a slurm host:\n%s", stdout)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("dry run created %s", out)
	}
}

// TestSlurmSweepOverSSH runs mbench off the cluster: the slurm host's
// address is its login machine, reached through a real OpenSSH sshd on
// loopback (sshdtest), which runs sbatch, srun, squeue and scancel against
// the real one-node Slurm of .ci/slurm-up.sh. The sweep uploads mbench to
// the login machine's work directory (which the node shares), the engines
// and probes are job steps whose logs stay there, step lines and probe
// samples come back into the local run directories, and the load reaches
// the engines through SSH tunnels. mbench is killed with SIGKILL after the
// first run: the allocation outlives it, resume reuses it over SSH and
// finishes, and nothing is left: not the allocation, not a step, not a
// process of the sweep.
func TestSlurmSweepOverSSH(t *testing.T) {
	t.Parallel()
	requireSlurm(t)
	if testing.Short() {
		t.Skip("end-to-end sweep over ssh and slurm")
	}
	_, home, workdir := sshHome(t, true)
	dir := t.TempDir()
	m := writeSlurmMatrix(t, dir, "slurm-ssh", "3")
	b, _ := os.ReadFile(m)
	body := strings.Replace(string(b), "    slurm: {", "    address: sshdtest\n    workdir: '"+workdir+"'\n    tunnel: true\n    slurm: {", 1)
	port := sshMatrixPort(t, m)
	writeTestFile(t, m, []byte(body))
	out := filepath.Join(dir, "out")
	most, stop := watchSteps(t, func() string { return slurmJob(out) })
	t.Cleanup(func() { // a failed test leaves no allocation behind
		if j := slurmJob(out); j != "" {
			_ = exec.Command("scancel", j).Run()
		}
	})
	c := startMbenchEnv(t, dir, sshEnv(home), "run", m, "--out", out, "--quiet")
	job := killAndResume(t, c, dir, out, 150*time.Second)
	stop()
	jobs := journalJobs(t, out)
	if len(jobs) != 3 || slices.ContainsFunc(jobs, func(j string) bool { return j != job }) {
		t.Errorf("runs ran in slurm jobs %v, want all three in %s", jobs, job)
	}
	if n := most(); n < 1 || n > 2 {
		t.Errorf("at most %d engine steps listed at once, want 1..2", n)
	}
	sweepID := sweepIDOf(t, out)
	state := filepath.Join(workdir, sweepID)
	if _, err := os.Stat(filepath.Join(state, "bin", "mbench")); err != nil {
		t.Errorf("mbench not uploaded to the login machine: %v", err)
	}
	if gpus := engineGPUs(t, state); !oneGPUEach(gpus) {
		t.Errorf("engine steps (logs on the login machine) saw CUDA_VISIBLE_DEVICES %v, want two GPUs of the node, one each", gpus)
	}
	if _, err := os.Stat(filepath.Join(out, ".state")); !os.IsNotExist(err) {
		t.Errorf("state written locally although the host is reached over SSH: %v", err)
	}
	checkSlurmProbes(t, out, 3)
	for d := range journaledDirs(out) {
		rd := filepath.Join(out, d)
		if st, err := os.Stat(filepath.Join(rd, "engine_step.jsonl")); err != nil || st.Size() == 0 {
			t.Errorf("%s: no step lines fetched from the login machine: %v", rd, err)
		}
		for tg := range requestTargets(t, rd) {
			if strings.HasSuffix(tg, ":"+port) || strings.HasSuffix(tg, ":"+strconv.Itoa(atoi(t, port)+1)) || !strings.HasPrefix(tg, "http://127.0.0.1:") {
				t.Errorf("%s: request target %s is an engine's own port, not an SSH tunnel", rd, tg)
			}
		}
	}
	checkSlurmTeardown(t, out, job)
	checkNothingLeft(t, workdir, sweepID)
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSlurmMultiNodeDryRun: a two-node slurm host asks Slurm for both
// nodes with the steps of the busiest node per node, places each instance
// on the node of its GPUs (one srun per node, GPUs numbered within it) and
// probes every node; validate refuses an instance that would span nodes.
// (The runtime path runs on the namespace test bed's two-node cluster:
// multinode_test.go.)
func TestSlurmMultiNodeDryRun(t *testing.T) {
	dir := t.TempDir()
	m := writeSlurmMatrix(t, dir, "slurm-multi", "2")
	b, _ := os.ReadFile(m)
	writeTestFile(t, m, []byte(strings.Replace(string(b), "gpus_per_node: 2}", "gpus_per_node: 1, nodes: 2}", 1)))
	slurmDryRun(t, m, filepath.Join(dir, "out"),
		" --nodes=2 --time=0:10:00 --ntasks-per-node=1 --cpus-per-task=1 --gres=gpu:1 --output=/dev/null '--wrap=",
		"--job-name=probe-cluster-0 --nodes=1 --ntasks=1 '--nodelist=<node 0>' --overlap --gres=gpu:1 ",
		"--job-name=probe-cluster-1 --nodes=1 --ntasks=1 '--nodelist=<node 1>' --overlap --gres=gpu:1 ",
		"--job-name=engine-cluster-0 --nodes=1 --ntasks=1 '--nodelist=<node 0>' --cpus-per-task=1 --exact --kill-on-bad-exit=1 --gres=gpu:1 ",
		"--job-name=engine-cluster-1 --nodes=1 --ntasks=1 '--nodelist=<node 1>' --cpus-per-task=1 --exact --kill-on-bad-exit=1 --gres=gpu:1 ",
		"--addr 0.0.0.0:",
	)
	// Two GPUs per instance on nodes of three: instance 1 would hold GPU 2
	// of node 0 and GPU 0 of node 1.
	b, _ = os.ReadFile(m)
	bad := strings.Replace(strings.Replace(string(b), "gpus_per_node: 1, nodes: 2}", "gpus_per_node: 3, nodes: 2}", 1), "gpus_per_instance: 1", "gpus_per_instance: 2", 1)
	writeTestFile(t, m, []byte(bad))
	_, stderr, err := runCLI(t, t.Context(), "validate", m)
	if err == nil || !strings.Contains(stderr+err.Error(), "instance 1 on slurm host cluster would span nodes 0 and 1") {
		t.Errorf("validate of an instance spanning nodes: %v\n%s", err, stderr)
	}
}

// editedSlurmMatrix is writeSlurmMatrix with from replaced by to.
func editedSlurmMatrix(t *testing.T, dir, name, blocks, from, to string) string {
	t.Helper()
	m := writeSlurmMatrix(t, dir, name, blocks)
	b, _ := os.ReadFile(m)
	edited := strings.Replace(string(b), from, to, 1)
	if edited == string(b) {
		t.Fatalf("%q not found in the test matrix", from)
	}
	writeTestFile(t, m, []byte(edited))
	return m
}

// TestSlurmAllocationPerBlock: with allocation: block every block runs in a
// new allocation, each cancelled when its block ends (Slurm's own record
// says so), and --dry-run says so.
func TestSlurmAllocationPerBlock(t *testing.T) {
	t.Parallel()
	requireSlurm(t)
	dir := t.TempDir()
	m := editedSlurmMatrix(t, dir, "slurm-per-block", "3", "slurm: {time_limit: 10m, gpus_per_node: 2}", "slurm: {time_limit: 10m, gpus_per_node: 2, allocation: block}")
	out := filepath.Join(dir, "out")
	slurmDryRun(t, m, out, "a new allocation for every block (allocation: block)")
	r := startMbench(t, dir, "run", m, "--out", out, "--quiet")
	mustFinish(t, r, 180*time.Second)
	jobs := journalJobs(t, out)
	if len(jobs) != 3 || jobs[0] == jobs[1] || jobs[1] == jobs[2] || jobs[0] == jobs[2] {
		t.Fatalf("the 3 blocks ran in jobs %v; want a new allocation for each", jobs)
	}
	for _, job := range jobs {
		checkSlurmTeardown(t, out, job)
	}
	log, _ := os.ReadFile(filepath.Join(out, "mbench.log"))
	if n := strings.Count(string(log), "slurm allocation of cluster ended (allocation: block)"); n != 3 {
		t.Errorf("mbench.log says %d times that a block's allocation ended, want 3", n)
	}
	for _, job := range jobs {
		if st := jobState(t, job); st != "COMPLETED" && st != "" {
			t.Errorf("block job %s is %s, want COMPLETED (its block finished)", job, st)
		}
	}
}

// TestSlurmTimeLimitEnds: an allocation whose time limit (1 minute, Slurm's
// least) ends mid-sweep stops the sweep with a clear error naming the job
// and its TIMEOUT state, and the run it cut short is not journaled (resume
// redoes it; TestSlurmAllocationEnds covers the resume).
func TestSlurmTimeLimitEnds(t *testing.T) {
	requireSlurm(t)
	if testing.Short() {
		t.Skip("waits for a one-minute Slurm time limit")
	}
	// 60-80 s of a sweep waiting on Slurm's own clock: MBENCH_LONG=1 (CI)
	// only. A plain run checks the same error path with
	// TestSlurmAllocationEnds (an allocation ended under a running sweep:
	// "slurm allocation ended … mbench resume", no failed run journaled,
	// resume finishes); only the TIMEOUT state name is this test's alone.
	longTest(t)
	dir := t.TempDir()
	m := editedSlurmMatrix(t, dir, "slurm-timeout", "500", "time_limit: 10m", "time_limit: 1m")
	out := filepath.Join(dir, "out")
	c := startMbench(t, dir, "run", m, "--out", out, "--quiet")
	// Slurm enforces time limits on its own clock (checked about every 30 s,
	// then KillWait): the sweep must end by itself well within 4 minutes.
	code := c.wait(4 * time.Minute)
	if code == -1 {
		c.kill()
		t.Fatalf("mbench still running 4 minutes into a 1-minute allocation:\n%s", c.output())
	}
	if code == 0 {
		log, _ := os.ReadFile(filepath.Join(out, "mbench.log"))
		t.Fatalf("the 500-block sweep finished inside its 1-minute allocation:\n%s\nmbench.log:\n%s", c.output(), log)
	}
	o := c.output()
	if !strings.Contains(o, "slurm allocation ended") || !strings.Contains(o, "TIMEOUT") || !strings.Contains(o, "mbench resume") {
		t.Errorf("the error does not say the allocation timed out and how to go on:\n%s", o)
	}
	runs := readJSONLStrict(t, filepath.Join(out, "journal.jsonl"))
	for i, r := range runs {
		if r["status"] == "failed" {
			t.Errorf("journal line %d: %v %v: a run lost with the allocation was journaled", i+1, r["status"], r["reason"])
		}
	}
	if len(runs) == 0 {
		t.Error("no run finished inside the allocation")
	}
	t.Logf("%d runs journaled before the time limit", len(runs))
}
