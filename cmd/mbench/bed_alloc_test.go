package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/netnstest"
)

// The allocation's life on the namespace test bed's cluster (see
// multinode_test.go): pending and max_wait, refusals, time zones,
// suspension, batch mode and the nodes' own mbench binary.

// testBedPendingMaxWait: while every node is taken by another job, the
// sweep's allocation pends; mbench says which job waits, Slurm's reason and
// for how long, and past max_wait it cancels the job and stops with an
// error that says so. Killed with SIGKILL while its job pends, a resumed
// mbench waits for that same job (no second one) once the nodes are free,
// and finishes in it.
func testBedPendingMaxWait(t *testing.T, bed *netnstest.Bed) {
	hold := func() string {
		out, err := bed.Slurm("sbatch", "--parsable", "--no-requeue", "--job-name=mbench-test-blocker", "--nodes=3", "--exclusive",
			"--time=5", "--output=/dev/null", "--wrap=sleep 300")
		if err != nil {
			t.Fatalf("blocker: %v %s", err, out)
		}
		job := strings.TrimSpace(out)
		t.Cleanup(func() { _, _ = bed.Slurm("scancel", job) })
		if st := bed.WaitJobState(job, 30*time.Second, "RUNNING"); st != "RUNNING" {
			t.Fatalf("blocker job %s is %s", job, st)
		}
		return job
	}
	blocker := hold()
	c, _, out := bedSweep(t, bed, "bed-pending", map[string]string{"%SLURM%": strings.Replace(twoNodeSlurm, "}", ", max_wait: 6s}", 1), "%BLOCKS%": "1"})
	code := c.wait(60 * time.Second)
	if code == 0 || code == -1 {
		c.kill()
		t.Fatalf("mbench exit %d with every node taken and max_wait 6s:\n%s", code, c.output())
	}
	o := c.output()
	m := regexp.MustCompile(`host cluster: slurm job ([0-9]+) \(mbench-bed-pending-[0-9a-f]+\) pending \(reason: (Resources|Priority)\) for [0-9]+s`).FindStringSubmatch(o)
	if m == nil {
		t.Fatalf("no line says which job pends, why and for how long:\n%s", o)
	}
	job := m[1]
	if !strings.Contains(o, "slurm job "+job+" still PENDING after") || !strings.Contains(o, "max_wait is 6s, so mbench cancels it") {
		t.Errorf("the error does not say the job pended past max_wait:\n%s", o)
	}
	if st := bed.WaitJobState(job, 30*time.Second, "CANCELLED", ""); st != "CANCELLED" && st != "" {
		t.Errorf("the job that pended past max_wait is %s, want CANCELLED", st)
	}

	// Killed while pending, resumed: the same job, once it runs.
	c, dir, out := bedSweep(t, bed, "bed-pending2", map[string]string{"%BLOCKS%": "1"})
	if !waitChild(c, 60*time.Second, func() bool { return strings.Contains(c.output(), ") pending (reason: ") }) {
		c.kill()
		t.Fatalf("never said it pends:\n%s", c.output())
	}
	c.kill()
	job = slurmJob(out)
	if job == "" || bed.JobState(job) != "PENDING" {
		t.Fatalf("after kill -9 the recorded job %q is %q, want PENDING", job, bed.JobState(job))
	}
	_, _ = bed.Slurm("scancel", blocker)
	r := startMbenchEnv(t, dir, c.env, "resume", out)
	mustFinish(t, r, 120*time.Second)
	if !strings.Contains(r.output(), "reusing slurm job "+job) {
		t.Errorf("resume did not wait for and reuse pending job %s:\n%s", job, r.output())
	}
	if ls, _ := bed.Slurm("squeue", "-h", "-t", "all", "-n", "mbench-"+sweepIDOf(t, out), "-o", "%i"); strings.TrimSpace(ls) != job {
		t.Errorf("jobs of the sweep: %q, want only %s", ls, job)
	}
	bedTeardown(t, bed, out, job, "COMPLETED")
}

// testBedRefused: a request Slurm refuses stops the sweep with Slurm's own
// message, and leaves no job.
func testBedRefused(t *testing.T, bed *netnstest.Bed) {
	for _, tc := range []struct{ slurm, want string }{
		{"{time_limit: 10m, gpus_per_node: 1, nodes: 2, partition: nope}", "sbatch: error: invalid partition specified: nope"},
		{"{time_limit: 10m, gpus_per_node: 1, nodes: 2, partition: mbn, mem: 100G}", "sbatch: error: Memory specification can not be satisfied"},
		// Slurm accepts a job over the partition's node limit (without
		// EnforcePartLimits) and keeps it pending: mbench does not wait.
		{"{time_limit: 10m, gpus_per_node: 1, nodes: 4, partition: mbn}", "can never run as asked: it is PENDING (reason: PartitionNodeLimit"},
	} {
		c, _, out := bedSweep(t, bed, "bed-refused", map[string]string{"%SLURM%": tc.slurm, "%BLOCKS%": "1"})
		code := c.wait(60 * time.Second)
		if code == 0 || code == -1 {
			c.kill()
			t.Fatalf("%s: mbench exit %d, want a failure:\n%s", tc.slurm, code, c.output())
		}
		if o := c.output(); !strings.Contains(o, tc.want) {
			t.Errorf("%s: the error lacks Slurm's own message %q:\n%s", tc.slurm, tc.want, o)
		}
		if j := slurmJob(out); j != "" {
			t.Errorf("%s: a refused request recorded job %s", tc.slurm, j)
		}
	}
}

// testBedTimeZones runs a sweep from a time zone 14 hours ahead of the
// cluster's (mbench's TZ, not the login node's: squeue runs there, over
// SSH): nothing depends on either zone, so the first engine starts and the
// sweep finishes.
func testBedTimeZones(t *testing.T, bed *netnstest.Bed) {
	login := bed.Hosts[0]
	work := t.TempDir()
	c, _, out := bedSweep(t, bed, "bed-tz", map[string]string{"%BLOCKS%": "1",
		"%HOST%": "    address: '" + login.Addr + "'\n    workdir: '" + work + "'\n"}, bedSSHEnv(t, bed, "TZ=Etc/GMT-14")...)
	mustFinish(t, c, 120*time.Second)
	jobs, _ := bedJournal(t, out, 1)
	bedTeardown(t, bed, out, jobs[0], "COMPLETED")
}

// testBedSuspended: the sweep's allocation is suspended while mbench is
// down (killed with SIGKILL); resume cancels it rather than leave it
// holding the nodes, and finishes in a new one.
func testBedSuspended(t *testing.T, bed *netnstest.Bed) {
	c, dir, out := bedSweep(t, bed, "bed-suspended", map[string]string{"%BLOCKS%": "2"})
	waitJournaled(t, c, out)
	c.kill()
	job := slurmJob(out)
	if o, err := bed.Slurm("scontrol", "suspend", job); err != nil {
		t.Fatalf("scontrol suspend %s: %v %s", job, err, o)
	}
	if st := bed.WaitJobState(job, 10*time.Second, "SUSPENDED"); st != "SUSPENDED" {
		t.Fatalf("job %s is %s, want SUSPENDED", job, st)
	}
	r := startMbenchEnv(t, dir, c.env, "resume", out)
	mustFinish(t, r, 120*time.Second)
	if !strings.Contains(r.output(), "slurm job "+job+" of this sweep is SUSPENDED; cancelling it") {
		t.Errorf("resume did not say it cancels the suspended job %s:\n%s", job, r.output())
	}
	if st := bed.JobState(job); st != "CANCELLED" && st != "" {
		t.Errorf("the suspended job %s is %s after resume, want CANCELLED", job, st)
	}
	jobs, _ := bedJournal(t, out, 2)
	if jobs[0] != job || jobs[1] == job {
		t.Errorf("runs ran in jobs %v; want the first in %s, the second in a new one", jobs, job)
	}
	bedTeardown(t, bed, out, jobs[1], "COMPLETED")
}

// testBedBatch runs mbench inside an allocation, as an sbatch job does:
// the job's script runs `mbench run` on the first node; mbench uses that
// job (SLURM_JOB_ID) for its engines, asks for no job of its own, sends the
// load from the node it runs on, and leaves the job to end with its
// script, COMPLETED.
func testBedBatch(t *testing.T, bed *netnstest.Bed) {
	dir := t.TempDir()
	m := writeBedMatrix(t, dir, map[string]string{"%NAME%": "bed-batch", "%BLOCKS%": "2"})
	out := filepath.Join(dir, "out")
	script := filepath.Join(dir, "job.sh")
	writeTestFile(t, script, []byte(fmt.Sprintf("#!/bin/sh\nexport MBENCH_TEST_AS_MBENCH=1 MBENCH_TEST_MAIN=1\necho mbench-test-batch-node=$(hostname)\nexec %s run %s --out %s --quiet\n",
		shellQuoteTest(os.Args[0]), shellQuoteTest(m), shellQuoteTest(out))))
	// sbatch exports its environment to the job: the bed's, outside any
	// allocation (bedEnv).
	sbatch := exec.Command("sbatch", "--parsable", "--job-name=mbench-test-batch", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
		"--gres=gpu:1", "--time=10", "--partition="+bed.Partition, "--output="+filepath.Join(dir, "job.log"), "--chdir="+dir, script)
	sbatch.Env = overEnv(os.Environ(), bedEnv(bed))
	o, err := sbatch.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v %s", err, o)
	}
	job := strings.TrimSpace(string(o))
	t.Cleanup(func() { _, _ = bed.Slurm("scancel", job) })
	st := bed.WaitJobState(job, 3*time.Minute, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
	log, _ := os.ReadFile(filepath.Join(dir, "job.log"))
	if st != "COMPLETED" {
		t.Fatalf("the batch job %s is %s, want COMPLETED:\n%s", job, st, log)
	}
	if !strings.Contains(string(log), "host cluster: inside slurm job "+job) {
		t.Errorf("mbench did not say it runs inside job %s:\n%s", job, log)
	}
	jobs, nodes := bedJournal(t, out, 2)
	for i := range jobs {
		if jobs[i] != job || strings.Count(nodes[i], ",") != 1 {
			t.Errorf("run %d ran in job %s on %s, want the batch job %s on its two nodes", i+1, jobs[i], nodes[i], job)
		}
	}
	if ls, _ := bed.Slurm("squeue", "-h", "-t", "all", "-n", "mbench-"+sweepIDOf(t, out), "-o", "%i"); strings.TrimSpace(ls) != "" {
		t.Errorf("mbench asked for a job of its own inside the allocation: %q", ls)
	}
	if !strings.Contains(string(log), "mbench-test-batch-node="+strings.Split(nodes[0], ",")[0]) {
		t.Errorf("mbench did not run on the allocation's first node:\n%s", log)
	}
	bed.NothingLeft(t, sweepIDOf(t, out), 10*time.Second)
}

// shellQuoteTest quotes s for sh.
func shellQuoteTest(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// testBedMbenchPath: a slurm host without an address may name the mbench
// binary its nodes run (hosts.X.mbench_path, a copy on a filesystem they
// share): the engines' {{.Self}} is that copy, not the one mbench runs from.
func testBedMbenchPath(t *testing.T, bed *netnstest.Bed) {
	bin := filepath.Join(t.TempDir(), "mbench-for-nodes")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, bin, data)
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	c, _, out := bedSweep(t, bed, "bed-mbench-path", map[string]string{"%BLOCKS%": "1", "%ROUTER%": "",
		"%HOST%": "    mbench_path: '" + bin + "'\n"})
	mustFinish(t, c, 120*time.Second)
	log, _ := os.ReadFile(filepath.Join(out, "mbench.log"))
	if n := strings.Count(string(log), "' "+bin+" sim --addr 0.0.0.0:"); n != 2 {
		t.Errorf("%d engine launches of the nodes' copy %s, want 2:\n%s", n, bin, log)
	}
	jobs, _ := bedJournal(t, out, 1)
	bedTeardown(t, bed, out, jobs[0], "COMPLETED")
}
