package hosts

import "context"

// NodeHost is a Host whose long-lived processes run on the nodes of an
// allocation rather than on the machine its commands and files are on: a
// Slurm host, whose commands run on a login machine and whose processes are
// job steps on compute nodes. Callers that need the nodes ask for this
// capability (h.(NodeHost)) instead of naming an implementation.
type NodeHost interface {
	Host
	// Allocation describes the allocation: its cluster, job and nodes.
	Allocation() Allocation
	// Alive returns nil while the allocation runs, else an error wrapping
	// ErrAllocationEnded that says what became of it.
	Alive(ctx context.Context) error
	// RunOnNode runs cmd on node i, sharing the allocation's resources and
	// binding no GPU.
	RunOnNode(ctx context.Context, i int, cmd string) (stdout, stderr []byte, err error)
	// RunOnNodeGPUs runs cmd on node i as a step named name that sees every
	// GPU of the allocation there (a GPU read).
	RunOnNodeGPUs(ctx context.Context, i int, name, cmd string) (stdout, stderr []byte, err error)
	// StartOnNode starts spec on node spec.Node as a long-lived process that
	// sees every GPU of the allocation there without taking them from the
	// engines (a probe); it returns once the process runs on the node.
	StartOnNode(ctx context.Context, spec ProcSpec) (Process, error)
	// Complete ends the allocation as a success (Slurm records it
	// COMPLETED), once the work in it is done and its processes stopped.
	// Close, without Complete, cancels it. An allocation mbench runs inside
	// is not its to end: Complete and Close only stop what mbench started.
	Complete(ctx context.Context) error
}

// Allocation is what a NodeHost runs on.
type Allocation struct {
	Cluster string // the cluster's name ("" when it has none)
	JobID   string
	JobName string
	// Nodes are the allocation's nodes in the order ProcSpec.Node indexes
	// them, and NodeAddrs the address at which each is reached from the
	// others (Slurm's NodeAddr).
	Nodes     []string
	NodeAddrs []string
	// Inside: mbench runs inside this allocation (a batch job), which it
	// neither asked for nor ends.
	Inside bool
}

// NodeAddr is the address of node i ("" past the last node).
func (a Allocation) NodeAddr(i int) string {
	if i < 0 || i >= len(a.NodeAddrs) {
		return ""
	}
	return a.NodeAddrs[i]
}
