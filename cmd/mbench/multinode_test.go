package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/orchestrator/hosts/netnstest"
)

// The multi-node tests run on the namespace test bed of .ci/netns-up.sh: a
// three-node Slurm cluster whose nodes are network namespaces of this
// machine (127.0.0.1 on one node is not another's), and three SSH hosts,
// each with its own sshd. mbench runs here, on the bed's "login node". They
// skip where the bed is not up, unless MBENCH_REQUIRE_NETNS=1. They must not
// run in parallel with each other: they share the bed's nodes.

// bedMatrix is a sim sweep on the bed's cluster: %SLURM% is the slurm
// section, %HOST% the host's other keys, %TOPO% the config's topology, %ROUTER% its router ("" for none),
// %BLOCKS% the blocks. Each engine prints the node it runs on (its
// hostname: the namespace's own) and the GPUs Slurm bound to it. Ports are
// fixed: each node is a network namespace of its own.
const bedMatrix = `name: %NAME%
seed: 7
hosts:
  cluster:
%HOST%    slurm: %SLURM%
engine:
  kind: sim
  port: 18100
  ready_timeout: 30s
  grace: 2s
  command: "sh -c 'echo mbench-test-node=$(hostname) gpus=$CUDA_VISIBLE_DEVICES; exec \"$0\" \"$@\"' {{.Self}} sim --addr {{.Bind}}:{{.Port}} --step-log {{.StepLog}} --model {{.Model}} {{.ConfigArgs}}"
  sim: {step_base_us: 1000, decode_seq_us: 20, prefill_token_us: 0.5}
configs:
  routed:
    topology: %TOPO%
%ROUTER%rates: [20]
shapes:
  - {name: 64x8, input: 64, output: 8}
measure: {warmup_requests: 3, min_completed: 20, timeout: 20s, drain_timeout: 3s}
repeat: {min: %BLOCKS%, max: %BLOCKS%, metric: ttft_p90, rel_ci: 0.05, confidence: 0.95}
gate: {enabled: false}
`

const bedRouter = `    router: {command: "{{.Self}} router --addr {{.Bind}}:{{.RouterPort}} --policy round_robin {{.Targets}}", port: 18200}
`

// twoNodeSlurm is a two-node allocation of one GPU per node: with two
// instances of one GPU, one instance on each node.
const twoNodeSlurm = "{time_limit: 10m, gpus_per_node: 1, nodes: 2, partition: mbn}"

// writeBedMatrix writes bedMatrix with repl into dir/m.yaml.
func writeBedMatrix(t *testing.T, dir string, repl map[string]string) string {
	t.Helper()
	body := bedMatrix
	def := map[string]string{"%HOST%": "", "%SLURM%": twoNodeSlurm, "%TOPO%": "{instances_per_host: 2, gpus_per_instance: 1}", "%ROUTER%": bedRouter, "%BLOCKS%": "3"}
	for k, v := range repl {
		def[k] = v
	}
	for k, v := range def {
		body = strings.ReplaceAll(body, k, v)
	}
	p := filepath.Join(dir, "m.yaml")
	writeTestFile(t, p, []byte(body))
	return p
}

// bedSweep starts `mbench run` of a bed matrix with the bed's cluster.
func bedSweep(t *testing.T, bed *netnstest.Bed, name string, repl map[string]string) (c *mbenchChild, dir, out string) {
	t.Helper()
	for _, kv := range bed.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	unsetEnv(t, "SLURM_JOB_ID") // not inside an allocation, whatever runs the test
	dir = t.TempDir()
	repl = mapsWith(repl, "%NAME%", name)
	m := writeBedMatrix(t, dir, repl)
	out = filepath.Join(dir, "out")
	t.Cleanup(func() { // a failed test leaves no allocation behind
		if j := slurmJob(out); j != "" {
			_, _ = bed.Slurm("scancel", j)
		}
	})
	return startMbench(t, dir, "run", m, "--out", out, "--quiet"), dir, out
}

func mapsWith(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for kk, vv := range m {
		out[kk] = vv
	}
	return out
}

var journalNodesRE = regexp.MustCompile(`^cluster: slurm job ([0-9]+) nodes? (\S+) \(cluster mbn\)$`)

// bedJournal checks the journal exactly: want runs, each ok, each naming
// one slurm job and its nodes; it returns the job and nodes of each run.
func bedJournal(t *testing.T, out string, want int) (jobs, nodes []string) {
	t.Helper()
	runs := readJSONLStrict(t, filepath.Join(out, "journal.jsonl"))
	if len(runs) != want {
		t.Fatalf("%d runs journaled, want %d", len(runs), want)
	}
	seen := map[string]bool{}
	for i, r := range runs {
		if r["status"] != "ok" && r["status"] != "client_limited" && r["status"] != "saturated" {
			t.Errorf("journal line %d: status %v (%v)", i+1, r["status"], r["reason"])
		}
		key := fmt.Sprintf("%v/%v", r["cell"], r["block"])
		if seen[key] {
			t.Errorf("journal line %d: run %s journaled twice", i+1, key)
		}
		seen[key] = true
		ns, _ := r["nodes"].([]any)
		if len(ns) != 1 {
			t.Fatalf("journal line %d: nodes %v, want the one slurm host", i+1, r["nodes"])
		}
		m := journalNodesRE.FindStringSubmatch(ns[0].(string))
		if m == nil {
			t.Fatalf("journal line %d: nodes %q", i+1, ns[0])
		}
		jobs, nodes = append(jobs, m[1]), append(nodes, m[2])
	}
	return jobs, nodes
}

// engineNodes returns the nodes the engine steps ran on (their hostnames,
// printed in their logs under the sweep's state directory).
func engineNodes(t *testing.T, state string) map[string]bool {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(state, "logs", "engine-*.log"))
	seen := map[string]bool{}
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		for _, m := range regexp.MustCompile(`mbench-test-node=(\S+)`).FindAllStringSubmatch(string(b), -1) {
			seen[m[1]] = true
		}
	}
	return seen
}

// routedBackends counts, over a run's routing.jsonl, the answered requests
// per backend URL the router used.
func routedBackends(t *testing.T, runDir string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, r := range readJSONL(t, filepath.Join(runDir, "routing.jsonl")) {
		if st, _ := r["status"].(float64); st == 200 {
			out[r["instance_url"].(string)]++
		}
	}
	return out
}

// bedTeardown: the job ended as want (COMPLETED for a finished sweep),
// lists no step, its record is gone, and no process of the sweep lives on
// any machine of the bed.
func bedTeardown(t *testing.T, bed *netnstest.Bed, out, job, want string) {
	t.Helper()
	if st := bed.WaitJobState(job, 30*time.Second, want); st != want {
		t.Errorf("slurm job %s is %q after mbench exited, want %s", job, st, want)
	}
	if s := bed.Steps(job); len(s) > 0 {
		t.Errorf("steps of job %s still listed: %v", job, s)
	}
	if _, err := os.Stat(filepath.Join(out, "slurm-cluster.json")); !os.IsNotExist(err) {
		t.Errorf("slurm-cluster.json still there: %v", err)
	}
	bed.NothingLeft(t, sweepIDOf(t, out), 10*time.Second)
}

// TestBedTwoNodeRouter runs a sweep on a two-node allocation of the bed's
// cluster: one engine instance per node, a router on the first node whose
// backends are on both (the one on its own node at loopback, the other at
// that node's address, Slurm's NodeAddr), the load sent from here to the
// router. mbench is killed with SIGKILL after the first run; resume reuses
// the allocation and finishes. The journal names the job and both nodes
// for every run, every run's requests reached both backends, the job ends
// COMPLETED, and nothing is left on any node.
func TestBedTwoNodeRouter(t *testing.T) {
	bed := netnstest.Require(t)
	c, dir, out := bedSweep(t, bed, "bed-router", nil)
	job := killAndResume(t, c, dir, out, 150*time.Second)
	jobs, nodes := bedJournal(t, out, 3)
	for i := range jobs {
		if jobs[i] != job || strings.Count(nodes[i], ",") != 1 {
			t.Errorf("run %d: slurm job %s nodes %s, want job %s on two nodes", i+1, jobs[i], nodes[i], job)
		}
	}
	alloc := strings.Split(nodes[0], ",")
	if got := engineNodes(t, filepath.Join(out, ".state")); len(got) != 2 || !got[alloc[0]] || !got[alloc[1]] {
		t.Errorf("engines ran on %v, want one on each of %v", got, alloc)
	}
	addr1 := ""
	for _, n := range bed.Nodes {
		if n.Name == alloc[1] {
			addr1 = n.Addr
		}
	}
	for d := range journaledDirs(out) {
		b := routedBackends(t, filepath.Join(out, d))
		want := []string{"http://127.0.0.1:18100", "http://" + addr1 + ":18101"}
		if len(b) != 2 || b[want[0]] == 0 || b[want[1]] == 0 {
			t.Errorf("%s: the router answered through %v, want both of %v", d, b, want)
		}
	}
	bedTeardown(t, bed, out, job, "COMPLETED")
	report, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if want := "| slurm cluster job " + job + " | cluster mbn, nodes " + nodes[0] + ", 3 run(s): "; !strings.Contains(string(report), want) {
		t.Errorf("report.md's environment does not name the cluster, job and nodes (want %q):\n%s", want, report)
	}
}

// TestBedNodeFailure: a node of the sweep's two-node allocation fails
// mid-sweep (Slurm sets it DOWN: the job ends NODE_FAIL; it is then drained
// so that it stays out). mbench stops with an error that says the
// allocation ended, journals no run for the one lost, and resume finishes
// the sweep in a new allocation on the two nodes left, with nothing left
// on any node.
func TestBedNodeFailure(t *testing.T) {
	bed := netnstest.Require(t)
	if len(bed.Nodes) < 3 {
		t.Skip("needs three nodes")
	}
	c, dir, out := bedSweep(t, bed, "bed-nodefail", map[string]string{"%BLOCKS%": "4"})
	waitJournaled(t, c, out)
	job := slurmJob(out)
	var rec struct{ Nodes []string }
	b, _ := os.ReadFile(filepath.Join(out, "slurm-cluster.json"))
	if err := json.Unmarshal(b, &rec); err != nil || len(rec.Nodes) != 2 {
		t.Fatalf("slurm-cluster.json: %v %s", err, b)
	}
	failed := rec.Nodes[1]
	t.Cleanup(func() { _, _ = bed.Slurm("scontrol", "update", "NodeName="+failed, "State=RESUME") })
	if o, err := bed.Slurm("scontrol", "update", "NodeName="+failed, "State=DOWN", "Reason=mbench-test-node-failure"); err != nil {
		t.Fatalf("%v %s", err, o)
	}
	if o, err := bed.Slurm("scontrol", "update", "NodeName="+failed, "State=DRAIN", "Reason=mbench-test-node-failure"); err != nil {
		t.Fatalf("%v %s", err, o)
	}
	code := c.wait(90 * time.Second)
	if code == 0 || code == -1 {
		c.kill()
		t.Fatalf("mbench exit %d after node %s failed, want a failure:\n%s", code, failed, c.output())
	}
	if o := c.output(); !strings.Contains(o, "slurm allocation ended") || !strings.Contains(o, "job "+job) || !strings.Contains(o, "NODE_FAIL") {
		t.Errorf("the error does not say allocation %s ended with its node:\n%s", job, o)
	}
	bed.NothingLeft(t, sweepIDOf(t, out), 15*time.Second)
	for i, r := range readJSONLStrict(t, filepath.Join(out, "journal.jsonl")) {
		if r["status"] != "ok" && r["status"] != "client_limited" {
			t.Errorf("journal line %d: %v %v: a run lost with the node was journaled", i+1, r["status"], r["reason"])
		}
	}
	r := startMbench(t, dir, "resume", out)
	mustFinish(t, r, 150*time.Second)
	jobs, nodes := bedJournal(t, out, 4)
	last := jobs[len(jobs)-1]
	if jobs[0] != job || last == job || strings.Contains(nodes[len(nodes)-1], failed) {
		t.Errorf("runs ran in jobs %v on %v; want the first in %s and the last in a new allocation without %s", jobs, nodes, job, failed)
	}
	bedTeardown(t, bed, out, last, "COMPLETED")
	if st := bed.JobState(job); st != "NODE_FAIL" && st != "" {
		t.Errorf("the failed allocation %s is %s, want NODE_FAIL", job, st)
	}
}

// sshTopology is a sim sweep over the bed's three SSH hosts: the router on
// mbn-h1, one engine on each of mbn-h2 and mbn-h3, reached from the router
// at their addresses (the bed's ~/.ssh/config knows them by address as by
// name; this machine resolves no bed name). %WORKDIR% is the hosts' work
// directory.
const sshTopology = `name: bed-ssh
seed: 7
hosts:
  h1: {address: '%H1%', workdir: '%WORKDIR%/h1'}
  h2: {address: '%H2%', workdir: '%WORKDIR%/h2'}
  h3: {address: '%H3%', workdir: '%WORKDIR%/h3'}
engine:
  kind: sim
  port: 18100
  ready_timeout: 30s
  grace: 2s
  command: "sh -c 'echo mbench-test-node=$(hostname); exec \"$0\" \"$@\"' {{.Self}} sim --addr {{.Bind}}:{{.Port}} --step-log {{.StepLog}} --model {{.Model}} {{.ConfigArgs}}"
  sim: {step_base_us: 1000, decode_seq_us: 20, prefill_token_us: 0.5}
configs:
  routed:
    topology: {hosts: [h2, h3], instances_per_host: 1}
    router: {command: "{{.Self}} router --addr {{.Bind}}:{{.RouterPort}} --policy round_robin {{.Targets}}", port: 18200, host: h1}
rates: [20]
shapes:
  - {name: 64x8, input: 64, output: 8}
measure: {warmup_requests: 3, min_completed: 20, timeout: 20s, drain_timeout: 3s}
repeat: {min: 3, max: 3, metric: ttft_p90, rel_ci: 0.05, confidence: 0.95}
gate: {enabled: false}
`

// TestBedSSHTopology runs a sweep over three SSH hosts of the bed, each a
// namespace with its own sshd: a router on one whose backends are the
// engines of the other two, reached at their addresses. mbench uploads
// itself to each host, is killed with SIGKILL after the first run (the
// tether stops the engines), and resume finishes. The journal is exact,
// every run's requests reached both backends, each engine ran on its own
// host, and nothing is left on any host.
func TestBedSSHTopology(t *testing.T) {
	bed := netnstest.Require(t)
	bed.SSHHome(t)
	dir := t.TempDir()
	work := t.TempDir()
	m := filepath.Join(dir, "m.yaml")
	addr := map[string]string{}
	for _, h := range bed.Hosts {
		addr[h.Name] = h.Addr
	}
	body := strings.NewReplacer("%WORKDIR%", work, "%H1%", addr["mbn-h1"], "%H2%", addr["mbn-h2"], "%H3%", addr["mbn-h3"]).Replace(sshTopology)
	writeTestFile(t, m, []byte(body))
	out := filepath.Join(dir, "out")
	c := startMbench(t, dir, "run", m, "--out", out, "--quiet")
	waitJournaled(t, c, out)
	c.kill()
	r := startMbench(t, dir, "resume", out)
	mustFinish(t, r, 150*time.Second)
	runs := readJSONLStrict(t, filepath.Join(out, "journal.jsonl"))
	if len(runs) != 3 {
		t.Fatalf("%d runs journaled, want 3", len(runs))
	}
	want := []string{"http://" + addr["mbn-h2"] + ":18100", "http://" + addr["mbn-h3"] + ":18100"}
	for d := range journaledDirs(out) {
		b := routedBackends(t, filepath.Join(out, d))
		if len(b) != 2 || b[want[0]] == 0 || b[want[1]] == 0 {
			t.Errorf("%s: the router answered through %v, want both of %v", d, b, want)
		}
	}
	id := sweepIDOf(t, out)
	for _, h := range []string{"h2", "h3"} {
		logs, _ := filepath.Glob(filepath.Join(work, h, id, "logs", "engine-*.log"))
		seen := map[string]bool{}
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			for _, m := range regexp.MustCompile(`mbench-test-node=(\S+)`).FindAllStringSubmatch(string(b), -1) {
				seen[m[1]] = true
			}
		}
		if len(seen) != 1 || !seen["mbn-"+h] {
			t.Errorf("host %s's engines ran on %v, want mbn-%s", h, slices.Collect(func(y func(string) bool) {
				for k := range seen {
					if !y(k) {
						return
					}
				}
			}), h)
		}
	}
	bed.NothingLeft(t, id, 10*time.Second)
	for _, h := range []string{"h1", "h2", "h3"} {
		if pf, _ := filepath.Glob(filepath.Join(work, h, id, "pids", "*.pid")); len(pf) > 0 {
			t.Errorf("pidfiles left on %s: %v", h, pf)
		}
	}
}

// unsetEnv removes an environment variable for the test (srun refuses an
// empty SLURM_JOB_ID, so t.Setenv(k, "") will not do).
func unsetEnv(t *testing.T, k string) {
	if v, ok := os.LookupEnv(k); ok {
		os.Unsetenv(k)
		t.Cleanup(func() { os.Setenv(k, v) })
	}
}

// TestBedPendingMaxWait: while every node is taken by another job, the
// sweep's allocation pends; mbench says which job waits, Slurm's reason and
// for how long, and past max_wait it cancels the job and stops with an
// error that says so. Killed with SIGKILL while its job pends, a resumed
// mbench waits for that same job (no second one) once the nodes are free,
// and finishes in it.
func TestBedPendingMaxWait(t *testing.T) {
	bed := netnstest.Require(t)
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
	r := startMbench(t, dir, "resume", out)
	mustFinish(t, r, 120*time.Second)
	if !strings.Contains(r.output(), "reusing slurm job "+job) {
		t.Errorf("resume did not wait for and reuse pending job %s:\n%s", job, r.output())
	}
	if ls, _ := bed.Slurm("squeue", "-h", "-t", "all", "-n", "mbench-"+sweepIDOf(t, out), "-o", "%i"); strings.TrimSpace(ls) != job {
		t.Errorf("jobs of the sweep: %q, want only %s", ls, job)
	}
	bedTeardown(t, bed, out, job, "COMPLETED")
}

// TestBedRefused: a request Slurm refuses stops the sweep with Slurm's own
// message, and leaves no job.
func TestBedRefused(t *testing.T) {
	bed := netnstest.Require(t)
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

// TestBedTimeZones runs a sweep from a time zone 14 hours ahead of the
// cluster's (mbench's TZ, not the login node's: squeue runs there, over
// SSH): nothing depends on either zone, so the first engine starts and the
// sweep finishes.
func TestBedTimeZones(t *testing.T) {
	bed := netnstest.Require(t)
	bed.SSHHome(t)
	t.Setenv("TZ", "Etc/GMT-14")
	login := bed.Hosts[0]
	work := t.TempDir()
	c, _, out := bedSweep(t, bed, "bed-tz", map[string]string{"%BLOCKS%": "1",
		"%HOST%": "    address: '" + login.Addr + "'\n    workdir: '" + work + "'\n"})
	mustFinish(t, c, 120*time.Second)
	jobs, _ := bedJournal(t, out, 1)
	bedTeardown(t, bed, out, jobs[0], "COMPLETED")
}

// TestBedSuspended: the sweep's allocation is suspended while mbench is
// down (killed with SIGKILL); resume cancels it rather than leave it
// holding the nodes, and finishes in a new one.
func TestBedSuspended(t *testing.T) {
	bed := netnstest.Require(t)
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
	r := startMbench(t, dir, "resume", out)
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

// TestBedBatch runs mbench inside an allocation, as an sbatch job does:
// the job's script runs `mbench run` on the first node; mbench uses that
// job (SLURM_JOB_ID) for its engines, asks for no job of its own, sends the
// load from the node it runs on, and leaves the job to end with its
// script, COMPLETED.
func TestBedBatch(t *testing.T) {
	bed := netnstest.Require(t)
	unsetEnv(t, "SLURM_JOB_ID")
	for _, kv := range bed.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	m := writeBedMatrix(t, dir, map[string]string{"%NAME%": "bed-batch", "%BLOCKS%": "2"})
	out := filepath.Join(dir, "out")
	script := filepath.Join(dir, "job.sh")
	writeTestFile(t, script, []byte(fmt.Sprintf("#!/bin/sh\nexport MBENCH_TEST_AS_MBENCH=1 MBENCH_TEST_MAIN=1\necho mbench-test-batch-node=$(hostname)\nexec %s run %s --out %s --quiet\n",
		shellQuoteTest(os.Args[0]), shellQuoteTest(m), shellQuoteTest(out))))
	o, err := bed.Slurm("sbatch", "--parsable", "--job-name=mbench-test-batch", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
		"--gres=gpu:1", "--time=10", "--partition="+bed.Partition, "--output="+filepath.Join(dir, "job.log"), "--chdir="+dir, script)
	if err != nil {
		t.Fatalf("sbatch: %v %s", err, o)
	}
	job := strings.TrimSpace(o)
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

// TestBedMbenchPath: a slurm host without an address may name the mbench
// binary its nodes run (hosts.X.mbench_path, a copy on a filesystem they
// share): the engines' {{.Self}} is that copy, not the one mbench runs from.
func TestBedMbenchPath(t *testing.T) {
	bed := netnstest.Require(t)
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
