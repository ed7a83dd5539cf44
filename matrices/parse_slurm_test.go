package matrices

import (
	"strings"
	"testing"
	"time"
)

const slurmBase = "name: x\nseed: 1\nhosts:\n  c:\n    slurm: {time_limit: 30m, gpus_per_node: 4, partition: gpu, options: [--qos=high]}\n" +
	"engine: {kind: vllm, command: 'serve {{.GPUs}}', model: m}\nconfigs: {a: {topology: {instances_per_host: 2, gpus_per_instance: 2}}}\nrates: [1]\nshapes: [{input: 8, output: 2}]\nmeasure: {min_completed: 3}\n"

// TestSlurmHost: a slurm host parses with its defaults, gets GPU indices
// for the topology, and its instances carry no CUDA_VISIBLE_DEVICES (Slurm
// binds the step's GPUs).
func TestSlurmHost(t *testing.T) {
	m := mustParse(t, "x.yaml", slurmBase)
	h := m.Hosts["c"]
	want := Slurm{Partition: "gpu", TimeLimit: 30 * time.Minute, Nodes: 1, GPUsPerNode: 4, CPUsPerInstance: 1, Options: []string{"--qos=high"}}
	if h.Slurm != nil && h.Slurm.Allocation != AllocationSweep {
		t.Errorf("allocation %q, want the default %q", h.Slurm.Allocation, AllocationSweep)
	}
	if h.Slurm == nil || h.Slurm.Partition != want.Partition || h.Slurm.TimeLimit != want.TimeLimit || h.Slurm.Nodes != 1 ||
		h.Slurm.GPUsPerNode != 4 || h.Slurm.CPUsPerInstance != 1 || strings.Join(h.Slurm.Options, " ") != "--qos=high" || h.Address != "" {
		t.Fatalf("host %+v slurm %+v, want %+v", h, h.Slurm, want)
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
	if n := (Host{Slurm: &Slurm{Nodes: 3}}).SlurmNode(4, nil); n != 1 {
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
		{"owned option", "--qos=high", "--gres=gpu:8", "x.yaml:5: hosts.c.slurm.options[0]: --gres is set by mbench"},
		{"not an option", "--qos=high", "qos", `hosts.c.slurm.options[0]: invalid option "qos"`},
		{"bad partition", "partition: gpu", "partition: 'a b'", `hosts.c.slurm.partition: invalid value "a b"`},
		{"gpus on slurm", "    slurm:", "    address: login0\n    gpus: [0]\n    slurm:", "x.yaml:6: hosts.c.gpus: gpus does not apply to a slurm host"},
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
