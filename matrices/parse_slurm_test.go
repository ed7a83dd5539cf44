package matrices

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/orchestrator/hosts"
)

const slurmBase = "name: x\nseed: 1\nhosts:\n  c:\n    slurm: {time_limit: 30m, gpus_per_node: 4, partition: gpu, options: [--qos=high]}\n" +
	"engine: {kind: vllm, command: 'serve {{.GPUs}}', model: m}\nconfigs: {a: {topology: {instances_per_host: 2, gpus_per_instance: 2}}}\nrates: [1]\nshapes: [{input: 8, output: 2}]\nmeasure: {min_completed: 3}\n"

// TestSlurmHost: a slurm host parses with its defaults (for vLLM: 2 + 2
// CPUs per GPU of an instance, all of each node's memory, whole nodes),
// gets GPU indices for the topology, and its instances carry no
// CUDA_VISIBLE_DEVICES (Slurm binds the step's GPUs).
func TestSlurmHost(t *testing.T) {
	m := mustParse(t, "x.yaml", slurmBase)
	h := m.Hosts["c"]
	want := hosts.SlurmRequest{Partition: "gpu", TimeLimit: 30 * time.Minute, Nodes: 1, GPUsPerNode: 4, CPUsPerInstance: 6, Mem: "0", Exclusive: true, Options: []string{"--qos=high"}}
	if h.Slurm != nil && h.Slurm.Allocation != AllocationSweep {
		t.Errorf("allocation %q, want the default %q", h.Slurm.Allocation, AllocationSweep)
	}
	if h.Slurm == nil || h.Slurm.Partition != want.Partition || h.Slurm.TimeLimit != want.TimeLimit || h.Slurm.Nodes != 1 ||
		h.Slurm.GPUsPerNode != 4 || h.Slurm.CPUsPerInstance != want.CPUsPerInstance || h.Slurm.Mem != want.Mem || h.Slurm.Exclusive != want.Exclusive ||
		strings.Join(h.Slurm.Options, " ") != "--qos=high" || h.Address != "" {
		t.Fatalf("host %+v slurm %+v, want %+v", h, h.Slurm, want)
	}
	// The simulated engine asks for what the matrix says and one CPU.
	sim := mustParse(t, "x.yaml", strings.Replace(strings.Replace(slurmBase, "kind: vllm, command: 'serve {{.GPUs}}'", "kind: sim", 1), ", model: m", ", model: m", 1))
	if sl := sim.Hosts["c"].Slurm; sl.CPUsPerInstance != 1 || sl.Mem != "" || sl.Exclusive {
		t.Errorf("sim defaults: %+v, want 1 CPU, the cluster's memory, shared nodes", sl)
	}
	set := mustParse(t, "x.yaml", strings.Replace(slurmBase, "partition: gpu", "partition: gpu, cpus_per_instance: 16, mem: 500G, exclusive: false, max_wait: 10m", 1))
	if sl := set.Hosts["c"].Slurm; sl.CPUsPerInstance != 16 || sl.Mem != "500G" || sl.Exclusive || sl.MaxWait != 10*time.Minute {
		t.Errorf("set values: %+v", sl)
	}
	l, err := m.Launch("a", Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Instances) != 2 || l.Instances[1].Command != "serve 2,3" {
		t.Fatalf("instances %+v", l.Instances)
	}
	for _, in := range l.Instances {
		for _, e := range in.Env {
			if e.Name == "CUDA_VISIBLE_DEVICES" {
				t.Errorf("instance %d sets CUDA_VISIBLE_DEVICES=%s on a slurm host", in.Index, e.Value)
			}
		}
	}
}

// TestSlurmMultiNode: the GPUs of a multi-node slurm host are numbered
// across its nodes; each instance runs on the node of its GPUs and sees
// them numbered within the node.
func TestSlurmMultiNode(t *testing.T) {
	src := strings.Replace(slurmBase, "gpus_per_node: 4", "gpus_per_node: 2, nodes: 2", 1)
	m := mustParse(t, "x.yaml", src)
	h := m.Hosts["c"]
	if len(h.GPUs) != 4 || h.Slurm.Nodes != 2 {
		t.Fatalf("host GPUs %v nodes %d, want 4 GPUs over 2 nodes", h.GPUs, h.Slurm.Nodes)
	}
	l, err := m.Launch("a", Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range l.Instances {
		if node := h.SlurmNode(in.Index, in.GPUs); node != i || in.Command != "serve 0,1" {
			t.Errorf("instance %d: node %d command %q, want node %d and serve 0,1", i, node, in.Command, i)
		}
	}
	if n := (Host{Slurm: &Slurm{SlurmRequest: hosts.SlurmRequest{Nodes: 3}}}).SlurmNode(4, nil); n != 1 {
		t.Errorf("an instance without GPUs: node %d, want 4 mod 3 = 1", n)
	}
}

// TestSlurmLogin: a slurm host with an address is reached over SSH at its
// login machine, and takes the SSH settings.
func TestSlurmLogin(t *testing.T) {
	src := strings.Replace(slurmBase, "    slurm:", "    address: me@login0:2222\n    tunnel: true\n    workdir: /shared/mb\n    host_key_policy: accept-new\n    slurm:", 1)
	m := mustParse(t, "x.yaml", src)
	h := m.Hosts["c"]
	if h.Slurm == nil || h.Address != "me@login0:2222" || !h.Tunnel || h.Workdir != "/shared/mb" || len(h.GPUs) != 4 {
		t.Fatalf("host %+v", h)
	}
}

// TestSlurmHostErrors: every bad slurm setting is reported at its line with
// its field.
func TestSlurmHostErrors(t *testing.T) {
	for _, tc := range []struct{ name, from, to, want string }{
		{"no time limit", "time_limit: 30m, ", "", "x.yaml:5: hosts.c.slurm.time_limit: missing required key"},
		{"time limit under a minute", "time_limit: 30m", "time_limit: 20s", "x.yaml:5: hosts.c.slurm.time_limit: time limit 20s is under a minute"},
		{"too few GPUs", "gpus_per_node: 4", "gpus_per_node: 3", "x.yaml:7: configs.a.topology: too few GPUs on slurm host c: 2 instance(s) × 2 GPU(s) need 4, the allocation asks 3 per node × 1 node(s)"},
		{"instance spans nodes", "gpus_per_node: 4", "gpus_per_node: 3, nodes: 2", "x.yaml:7: configs.a.topology: instance 1 on slurm host c would span nodes 0 and 1 (GPUs 2-3, 3 per node): a step runs on one node"},
		{"too few GPUs on the nodes", "gpus_per_node: 4", "gpus_per_node: 1, nodes: 3", "too few GPUs on slurm host c: 2 instance(s) × 2 GPU(s) need 4, the allocation asks 1 per node × 3 node(s)"},
		{"owned option", "--qos=high", "--job-name=x", "x.yaml:5: hosts.c.slurm.options[0]: --job-name is set by mbench"},
		{"gres option", "--qos=high", "--gres=gpu:8", "x.yaml:5: hosts.c.slurm.options[0]: --gres is set from hosts.c.slurm.gpus_per_node: use that key"},
		{"gpus-per-node option", "--qos=high", "--gpus-per-node=8", "hosts.c.slurm.options[0]: --gpus-per-node is set from hosts.c.slurm.gpus_per_node"},
		{"short GPU option", "--qos=high", "-G8", "hosts.c.slurm.options[0]: -G is set from hosts.c.slurm.gpus_per_node"},
		{"nodes option", "--qos=high", "--nodes=2", "hosts.c.slurm.options[0]: --nodes is set from hosts.c.slurm.nodes"},
		{"short nodes option", "--qos=high", "-N2", "hosts.c.slurm.options[0]: -N is set from hosts.c.slurm.nodes"},
		{"cpus option", "--qos=high", "-c4", "hosts.c.slurm.options[0]: -c is set from hosts.c.slurm.cpus_per_instance"},
		{"mem option", "--qos=high", "--mem=64G", "hosts.c.slurm.options[0]: --mem is set from hosts.c.slurm.mem"},
		{"exclusive option", "--qos=high", "--exclusive", "hosts.c.slurm.options[0]: --exclusive is set from hosts.c.slurm.exclusive"},
		{"step GPU option", "options: [--qos=high]", "step_options: [--gpus-per-task=1]", "hosts.c.slurm.step_options[0]: --gpus-per-task is set from hosts.c.slurm.gpus_per_node"},
		{"step nodes option", "options: [--qos=high]", "step_options: [-N1]", "hosts.c.slurm.step_options[0]: -N is set from hosts.c.slurm.nodes"},
		{"bad mem", "partition: gpu", "partition: gpu, mem: lots", `hosts.c.slurm.mem: invalid value "lots"`},
		{"no GPUs asked", "gpus_per_node: 4", "gpus_per_node: 0", "configs.a.topology: instances of 2 GPU(s) on slurm host c, which asks Slurm for no GPUs (hosts.c.slurm.gpus_per_node is 0)"},
		{"not an option", "--qos=high", "qos", `hosts.c.slurm.options[0]: invalid option "qos"`},
		{"bad partition", "partition: gpu", "partition: 'a b'", `hosts.c.slurm.partition: invalid value "a b"`},
		{"gpus on slurm", "    slurm:", "    address: login0\n    gpus: [0]\n    slurm:", "x.yaml:6: hosts.c.gpus: gpus does not apply to a slurm host"},
		{"workdir on local slurm", "    slurm:", "    workdir: /x\n    slurm:", "x.yaml:5: hosts.c.workdir: workdir applies to a slurm host only when"},
		{"ssh key on slurm", "    slurm:", "    tunnel: true\n    slurm:", "x.yaml:5: hosts.c.tunnel: tunnel applies to a slurm host only when mbench reaches its login machine over SSH (address)"},
		{"unknown key", "partition: gpu", "partiton: gpu", "hosts.c.slurm.partiton: unknown key"},
		{"bad allocation", "partition: gpu", "partition: gpu, allocation: run", "hosts.c.slurm.allocation: unknown value \"run\"; valid: sweep, block"},
		{"neither", "    slurm: {time_limit: 30m, gpus_per_node: 4, partition: gpu, options: [--qos=high]}", "    gpus: [0]", "x.yaml:4: hosts.c.address: missing required key (or a slurm section)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(slurmBase, tc.from, tc.to, 1)
			if src == slurmBase {
				t.Fatalf("replacement %q not found", tc.from)
			}
			_, err := Parse("x.yaml", []byte(src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

// TestSlurmStepMemAndMbenchPath: step_options may set a step's memory (no
// key owns it), and a slurm host without an address may name the mbench
// binary its nodes run.
func TestSlurmStepMemAndMbenchPath(t *testing.T) {
	src := strings.Replace(slurmBase, "    slurm:", "    mbench_path: /shared/bin/mbench\n    slurm:", 1)
	src = strings.Replace(src, "options: [--qos=high]", "step_options: [--mem=16G]", 1)
	m := mustParse(t, "x.yaml", src)
	if h := m.Hosts["c"]; h.MbenchPath != "/shared/bin/mbench" || strings.Join(h.Slurm.StepOptions, " ") != "--mem=16G" {
		t.Errorf("host %+v slurm %+v", h, h.Slurm)
	}
}

// TestSlurmTimeLimitWarning: a time limit shorter than validate's estimate
// of the sweep (or, with allocation: block, of one block) is warned about;
// one that covers it is not.
func TestSlurmTimeLimitWarning(t *testing.T) {
	src := strings.Replace(slurmBase, "measure: {min_completed: 3}", "measure: {min_completed: 3}\nrepeat: {min: 3, max: 3}", 1)
	long := mustParse(t, "x.yaml", strings.Replace(src, "time_limit: 30m", "time_limit: 2h", 1))
	if ws := long.slurmWarnings(); len(ws) != 0 {
		t.Errorf("a 2h limit over a %s sweep: %v", long.EstimateDuration(), ws)
	}
	short := mustParse(t, "x.yaml", strings.Replace(src, "time_limit: 30m", "time_limit: 1m", 1))
	ws := short.slurmWarnings()
	if len(ws) != 1 || ws[0].Field != "hosts.c.slurm.time_limit" || !strings.Contains(ws[0].Msg, "time limit 1m0s is shorter than the estimate of the sweep's 3 block(s)") {
		t.Fatalf("a 1m limit over a %s sweep: %v", short.EstimateDuration(), ws)
	}
	found := false
	for _, w := range short.Warnings() {
		found = found || w.Field == "hosts.c.slurm.time_limit"
	}
	if !found {
		t.Error("Warnings() does not carry the time limit warning")
	}
	block := mustParse(t, "x.yaml", strings.Replace(src, "time_limit: 30m", "time_limit: 4m, allocation: block", 1))
	if ws := block.slurmWarnings(); len(ws) != 0 {
		t.Errorf("allocation: block, 4m per block of about %s: %v", secondsDuration(block.passSeconds(block.Cells())), ws)
	}
}

// TestSlurmTargetsAcrossNodes: a router on node 0 of a two-node slurm host
// reaches the instance on node 1 at node 1's address (Slurm's NodeAddr),
// the one on its own node at loopback; {{.NodeName}} and {{.NodeAddress}}
// are each instance's own node; an SSH router reaches both at their nodes'
// addresses; before the allocation exists, placeholders say so.
func TestSlurmTargetsAcrossNodes(t *testing.T) {
	src := `name: x
seed: 1
hosts:
  c:
    slurm: {time_limit: 30m, gpus_per_node: 1, nodes: 2}
  gw: {address: me@gw0:2222}
engine: {kind: sim, command: 'sim --addr {{.Bind}}:{{.Port}} --node {{.NodeName}} --at {{.NodeAddress}}', model: m}
configs:
  local: {topology: {hosts: [c], instances_per_host: 2, gpus_per_instance: 1}, router: {command: 'route {{.Targets}}', port: 9000}}
  remote: {topology: {hosts: [c], instances_per_host: 2, gpus_per_instance: 1}, router: {command: 'route {{.Targets}}', port: 9000, host: gw}}
rates: [1]
shapes: [{input: 8, output: 2}]
measure: {min_completed: 3}
`
	m := mustParse(t, "x.yaml", src)
	rt := Runtime{Bind: "0.0.0.0", Node: func(host string, i int) (string, string, bool) {
		return fmt.Sprintf("n%d", i+1), fmt.Sprintf("10.0.0.%d", i+11), host == "c"
	}}
	for _, tc := range []struct{ config, router string }{
		{"local", "route http://127.0.0.1:8000 http://10.0.0.12:8001"},
		{"remote", "route http://10.0.0.11:8000 http://10.0.0.12:8001"},
	} {
		l, err := m.Launch(tc.config, rt)
		if err != nil {
			t.Fatal(err)
		}
		if l.Router.Command != tc.router {
			t.Errorf("%s: router command %q, want %q", tc.config, l.Router.Command, tc.router)
		}
		for i, in := range l.Instances {
			if want := fmt.Sprintf("--node n%d --at 10.0.0.%d", i+1, i+11); !strings.HasSuffix(in.Command, want) {
				t.Errorf("%s: instance %d command %q, want it to end %q", tc.config, i, in.Command, want)
			}
		}
	}
	l, err := m.Launch("local", Runtime{Bind: "0.0.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "route http://127.0.0.1:8000 'http://<node 1 address>:8001'"; l.Router.Command != want {
		t.Errorf("before the allocation: router command %q, want %q", l.Router.Command, want)
	}
}

// TestSlurmSimNeedsGPUs: a simulated engine whose instances ask for GPUs on
// a slurm host that asks Slurm for none is refused too (its steps would
// bind none), while on an SSH host without a GPU list it may (it uses none).
func TestSlurmSimNeedsGPUs(t *testing.T) {
	src := strings.Replace(strings.Replace(slurmBase, "kind: vllm, command: 'serve {{.GPUs}}'", "kind: sim", 1), "gpus_per_node: 4, ", "", 1)
	_, err := Parse("x.yaml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "configs.a.topology: instances of 2 GPU(s) on slurm host c, which asks Slurm for no GPUs") {
		t.Errorf("sim on a slurm host without GPUs: %v", err)
	}
	ssh := strings.Replace(src, "    slurm: {time_limit: 30m, partition: gpu, options: [--qos=high]}", "    address: gpu0", 1)
	if ssh == src {
		t.Fatal("replacement not found")
	}
	if _, err := Parse("x.yaml", []byte(ssh)); err != nil {
		t.Errorf("sim on an SSH host without a GPU list: %v", err)
	}
}
