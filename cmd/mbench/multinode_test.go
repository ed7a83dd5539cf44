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

	"github.com/mbench/mbench/internal/netnstest"
)

// The multi-node tests run on the namespace test bed of .ci/netns-up.sh: a
// three-node Slurm cluster whose nodes are network namespaces of this
// machine (127.0.0.1 on one node is not another's), and three SSH hosts,
// each with its own sshd. mbench runs here, on the bed's "login node". They
// skip where the bed is not up, unless MBENCH_REQUIRE_NETNS=1. Those on the
// cluster must not run in parallel with each other (they share the bed's
// nodes and fixed ports): TestBed runs them one after another, the group
// beside the package's other parallel tests and TestBedSSHTopology, which
// uses the SSH hosts alone. So each gives the mbench it
// starts its environment (the bed's SLURM_CONF, HOME, TZ: bedEnv,
// startMbenchEnv) rather than setting the test process's.

// TestBed runs the bed's tests in order while holding the bed (its lock),
// in parallel with the package's other tests.
func TestBed(t *testing.T) {
	t.Parallel()
	bed := netnstest.Require(t)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *netnstest.Bed)
	}{
		{"PendingMaxWait", testBedPendingMaxWait},
		{"Refused", testBedRefused},
		{"TimeZones", testBedTimeZones},
		{"Suspended", testBedSuspended},
		{"Batch", testBedBatch},
		{"MbenchPath", testBedMbenchPath},
		{"TwoNodeRouter", testBedTwoNodeRouter},
		{"NodeFailure", testBedNodeFailure},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, bed) })
	}
}

// bedEnv is the environment of an mbench on the bed's login node: the
// bed's cluster (SLURM_CONF), outside any allocation whatever runs the test
// (SLURM_JOB_ID removed: srun refuses an empty one), and extra.
func bedEnv(bed *netnstest.Bed, extra ...string) []string {
	return append(append(bed.Env(), "SLURM_JOB_ID"), extra...)
}

// bedSSHEnv is bedEnv with the bed's SSH client setup as HOME.
func bedSSHEnv(t *testing.T, bed *netnstest.Bed, extra ...string) []string {
	return bedEnv(bed, append([]string{"HOME=" + bed.SSHHomeDir(t), "SSH_AUTH_SOCK="}, extra...)...)
}

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

// bedSweep starts `mbench run` of a bed matrix with the bed's cluster, in
// env (bedEnv when nil).
func bedSweep(t *testing.T, bed *netnstest.Bed, name string, repl map[string]string, env ...string) (c *mbenchChild, dir, out string) {
	t.Helper()
	if env == nil {
		env = bedEnv(bed)
	}
	dir = t.TempDir()
	repl = mapsWith(repl, "%NAME%", name)
	m := writeBedMatrix(t, dir, repl)
	out = filepath.Join(dir, "out")
	t.Cleanup(func() { // a failed test leaves no allocation behind
		if j := slurmJob(out); j != "" {
			_, _ = bed.Slurm("scancel", j)
		}
	})
	return startMbenchEnv(t, dir, env, "run", m, "--out", out, "--quiet"), dir, out
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

// testBedTwoNodeRouter runs a sweep on a two-node allocation of the bed's
// cluster: one engine instance per node, a router on the first node whose
// backends are on both (the one on its own node at loopback, the other at
// that node's address, Slurm's NodeAddr), the load sent from here to the
// router. mbench is killed with SIGKILL after the first run; resume reuses
// the allocation and finishes. The journal names the job and both nodes
// for every run, every run's requests reached both backends, the job ends
// COMPLETED, and nothing is left on any node.
func testBedTwoNodeRouter(t *testing.T, bed *netnstest.Bed) {
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
func testBedNodeFailure(t *testing.T, bed *netnstest.Bed) {
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
	r := startMbenchEnv(t, dir, c.env, "resume", out)
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
// directory. Its ports are not the cluster tests' (18100, 18200), so that
// no cluster test, of this version or an older one sharing the bed, holds
// them while it runs beside.
const sshTopology = `name: bed-ssh
seed: 7
hosts:
  h1: {address: '%H1%', workdir: '%WORKDIR%/h1'}
  h2: {address: '%H2%', workdir: '%WORKDIR%/h2'}
  h3: {address: '%H3%', workdir: '%WORKDIR%/h3'}
engine:
  kind: sim
  port: 18400
  ready_timeout: 30s
  grace: 2s
  command: "sh -c 'echo mbench-test-node=$(hostname); exec \"$0\" \"$@\"' {{.Self}} sim --addr {{.Bind}}:{{.Port}} --step-log {{.StepLog}} --model {{.Model}} {{.ConfigArgs}}"
  sim: {step_base_us: 1000, decode_seq_us: 20, prefill_token_us: 0.5}
configs:
  routed:
    topology: {hosts: [h2, h3], instances_per_host: 1}
    router: {command: "{{.Self}} router --addr {{.Bind}}:{{.RouterPort}} --policy round_robin {{.Targets}}", port: 18500, host: h1}
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
// host, and nothing is left on any host. It uses no node of the bed's
// cluster, so it runs beside TestBed (netnstest.RequireHosts).
func TestBedSSHTopology(t *testing.T) {
	t.Parallel()
	bed := netnstest.RequireHosts(t)
	env := bedSSHEnv(t, bed)
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
	c := startMbenchEnv(t, dir, env, "run", m, "--out", out, "--quiet")
	waitJournaled(t, c, out)
	c.kill()
	r := startMbenchEnv(t, dir, env, "resume", out)
	mustFinish(t, r, 150*time.Second)
	runs := readJSONLStrict(t, filepath.Join(out, "journal.jsonl"))
	if len(runs) != 3 {
		t.Fatalf("%d runs journaled, want 3", len(runs))
	}
	want := []string{"http://" + addr["mbn-h2"] + ":18400", "http://" + addr["mbn-h3"] + ":18400"}
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
