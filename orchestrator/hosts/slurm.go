package hosts

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/mbench/mbench/shquote"
)

// SlurmRequest is what a slurm host asks of the cluster, as the matrix
// writes it (hosts.<name>.slurm; matrices.Slurm adds the allocation's
// lifetime): one allocation, engine instances started in it as job steps
// with their GPUs bound by Slurm.
type SlurmRequest struct {
	Partition  string        // -p ("" = the cluster's default)
	Account    string        // -A ("" = the user's default)
	Constraint string        // -C ("" = none)
	TimeLimit  time.Duration // -t, rounded up to whole minutes: the allocation ends by itself at the latest then
	// Nodes is -N (0 = 1): the instances of the host are spread over them
	// by their GPUs; with several, Steps is per node.
	Nodes int
	// GPUsPerNode is the GPUs asked per node (--gres=gpu:N); 0 asks none.
	GPUsPerNode int
	// CPUsPerInstance is each engine step's CPUs (-c; 0 = 1). The
	// matrix's default suits the engine: for vLLM 2 + 2 × the most GPUs an
	// instance of the host has (its API server and engine core, a worker
	// and its threads per GPU: with task/affinity a step is pinned to its
	// CPUs); 1 for sim.
	CPUsPerInstance int
	// Mem is the job's memory per node (--mem: "64G", or "0" for all of
	// each node's); "" leaves the cluster's default. vLLM's default is "0"
	// (weights are loaded, and KV blocks swapped, through host memory).
	Mem string `json:",omitempty"`
	// Exclusive asks for whole nodes (--exclusive), so that no other job
	// shares the nodes being measured; vLLM's default is true, sim's false.
	Exclusive bool `json:",omitempty"`
	// MaxWait bounds how long the allocation may stay pending: past it
	// mbench cancels the job and stops with Slurm's reason (0: no bound).
	MaxWait     time.Duration `json:",omitempty"`
	Options     []string      // extra sbatch options, passed as written
	StepOptions []string      // extra srun options for engine steps
}

// SlurmConfig is one Slurm host of a sweep: what to ask Slurm for, and
// where the allocation is recorded so that a resumed sweep finds it again.
type SlurmConfig struct {
	SlurmRequest
	Name    string // the host's name in the matrix
	JobName string // the allocation's job name, one per sweep (mbench-<sweep id>)
	JobFile string // local file recording the allocation (in the results directory)
	Steps   int    // engine steps at once at most: the job asks that many tasks of CPUsPerInstance CPUs (0 = 1)
	// Inside is the job id of the allocation mbench runs in (SLURM_JOB_ID
	// of a batch job): its nodes are used, no job is asked for, and it is
	// not cancelled at the end. "" asks Slurm for a job of the sweep's own.
	Inside string
	Warn   io.Writer
}

// SlurmTime renders a duration as Slurm's -t takes it,
// [days-]hours:minutes:seconds rounded up to whole minutes.
func SlurmTime(d time.Duration) string {
	m := int64((d + time.Minute - 1) / time.Minute)
	days, h, mm := m/(24*60), (m/60)%24, m%60
	if days > 0 {
		return fmt.Sprintf("%d-%02d:%02d:00", days, h, mm)
	}
	return fmt.Sprintf("%d:%02d:00", h, mm)
}

// holderScript is the batch script of the sweep's job: it holds the
// allocation until mbench ends it with SIGTERM (scancel --batch), then
// exits 0, so that Slurm records the job COMPLETED. Its sleep is killed
// first: a child left behind would outlive the job (proctrack/linuxproc
// loses re-parented processes).
const holderScript = `trap 'kill $! 2>/dev/null; exit 0' TERM; while :; do sleep 3600 & wait $!; done`

// SbatchCommand is the sbatch command line, as one sh command, that asks
// for the allocation: a job whose batch script only holds it
// (holderScript), its output discarded, never requeued (after a node
// failure Slurm would otherwise run the same job id again on other nodes,
// and the recorded nodes would be wrong); engines run in it as steps.
func (c SlurmConfig) SbatchCommand() string {
	a := []string{"sbatch", "--parsable", "--no-requeue", "--job-name=" + c.JobName, "--nodes=" + strconv.Itoa(max(c.Nodes, 1)), "--time=" + SlurmTime(c.TimeLimit)}
	if c.Nodes > 1 {
		a = append(a, "--ntasks-per-node="+strconv.Itoa(max(c.Steps, 1)))
	} else {
		a = append(a, "--ntasks="+strconv.Itoa(max(c.Steps, 1)))
	}
	a = append(a, "--cpus-per-task="+strconv.Itoa(max(c.CPUsPerInstance, 1)))
	if c.Mem != "" {
		a = append(a, "--mem="+c.Mem)
	}
	if c.Exclusive {
		a = append(a, "--exclusive")
	}
	for _, o := range [][2]string{{"--partition=", c.Partition}, {"--account=", c.Account}, {"--constraint=", c.Constraint}} {
		if o[1] != "" {
			a = append(a, o[0]+o[1])
		}
	}
	if c.GPUsPerNode > 0 {
		a = append(a, "--gres=gpu:"+strconv.Itoa(c.GPUsPerNode))
	}
	a = append(a, "--output=/dev/null")
	a = append(a, c.Options...)
	return shquote.Join(append(a, "--wrap="+holderScript))
}

// StepCommand is the sh command line that runs command as an engine step:
// one task on the node, with gpus GPUs of the allocation bound to it by
// Slurm (--exact, so two steps never share a GPU: --overlap steps would),
// named after the process.
func (c SlurmConfig) StepCommand(jobID, node, name string, gpus int, command string) string {
	cpus := max(c.CPUsPerInstance, 1)
	a := []string{"srun", "--jobid=" + jobID, "--job-name=" + name, "--nodes=1", "--ntasks=1", "--nodelist=" + node,
		"--cpus-per-task=" + strconv.Itoa(cpus), "--exact", "--kill-on-bad-exit=1"}
	if gpus > 0 {
		a = append(a, "--gres=gpu:"+strconv.Itoa(gpus))
	} else {
		a = append(a, "--gres=none", "--overlap")
	}
	return shquote.Join(append(a, c.StepOptions...)) + " sh -c " + shquote.Quote(command)
}

// nodeTag is the tag (MBENCH_PROC) of a step's processes on its node: the
// process's own tag with "@node", so that stopping srun on the login
// machine never reaches them and the node's own sweep (reapScript) finds
// what the step left there.
func nodeTag(tag string) string { return tag + "@node" }

// nodeTask is the command a step's task runs on the node: it tags the
// processes it starts (nodeTag), records its pid in nodePidFile and execs
// command.
func nodeTask(command, nodePidFile string) string {
	return `export ` + procTagEnv + `="$` + procTagEnv + `@node"; echo $$ >` + quotePath(nodePidFile) + " && exec sh -c " + shquote.Quote(command)
}

// EngineStepCommand is StepCommand for a process that records the pid of
// the step's task on the node in nodePidFile before it execs command (see
// NodeProcess): what Start runs.
func (c SlurmConfig) EngineStepCommand(jobID, node, name string, gpus int, command, nodePidFile string) string {
	return c.StepCommand(jobID, node, name, gpus, nodeTask(command, nodePidFile))
}

// OverlapArgs is the srun line of a step named name that shares the
// allocation's resources with the engine steps (--overlap) and is bound to
// every GPU of the allocation on the node, so that a probe in it sees the
// GPUs the engines use (where the cluster constrains devices by cgroup, a
// step sees only the GPUs bound to it).
func (c SlurmConfig) OverlapArgs(jobID, node, name string) []string {
	a := []string{"srun", "--jobid=" + jobID, "--job-name=" + name, "--nodes=1", "--ntasks=1", "--nodelist=" + node, "--overlap"}
	if c.GPUsPerNode > 0 {
		return append(a, "--gres=gpu:"+strconv.Itoa(c.GPUsPerNode))
	}
	return append(a, "--gres=none")
}

// ErrAllocationEnded is wrapped by errors caused by the sweep's allocation
// having ended (time limit, scancel, node failure, suspension).
var ErrAllocationEnded = errors.New("slurm allocation ended")

// slurmRecord is the allocation as recorded in SlurmConfig.JobFile.
type slurmRecord struct {
	JobID    string `json:"job_id"`
	JobName  string `json:"job_name"`
	Cluster  string `json:"cluster,omitempty"`
	Node     string `json:"node,omitempty"`      // the first node
	NodeAddr string `json:"node_addr,omitempty"` // its address
	// Nodes and NodeAddrs are every node of the allocation and its
	// address, in Slurm's order (empty while the job is pending).
	Nodes     []string  `json:"nodes,omitempty"`
	NodeAddrs []string  `json:"node_addrs,omitempty"`
	Submitted time.Time `json:"submitted,omitzero"`
	Granted   time.Time `json:"granted,omitzero"`
}

// Slurm is a NodeHost whose processes are job steps of one Slurm
// allocation. Commands, files and pidfiles are on the login machine
// (login), which runs sbatch and srun; the compute nodes must share the
// filesystem of the paths used.
type Slurm struct {
	Host  // the login machine: Run, Put, Get, Size, Forward
	cfg   SlurmConfig
	rec   slurmRecord
	ended bool // completed or cancelled by mbench: Close has nothing to release
}

var _ NodeHost = (*Slurm)(nil)

// JobID is the allocation's job id.
func (s *Slurm) JobID() string { return s.rec.JobID }

// Nodes are the allocation's nodes, in Slurm's order: a process's
// ProcSpec.Node indexes them.
func (s *Slurm) Nodes() []string {
	if len(s.rec.Nodes) == 0 && s.rec.Node != "" { // a record of a one-node allocation
		return []string{s.rec.Node}
	}
	return s.rec.Nodes
}

// nodeAddrs is the address of each node.
func (s *Slurm) nodeAddrs() []string {
	if len(s.rec.NodeAddrs) == 0 && s.rec.NodeAddr != "" {
		return []string{s.rec.NodeAddr}
	}
	return s.rec.NodeAddrs
}

// Allocation implements NodeHost.
func (s *Slurm) Allocation() Allocation {
	return Allocation{Cluster: s.rec.Cluster, JobID: s.rec.JobID, JobName: s.rec.JobName,
		Nodes: s.Nodes(), NodeAddrs: s.nodeAddrs(), Inside: s.cfg.Inside != ""}
}

// node is the name of node i, or an error for an index past the allocation.
func (s *Slurm) node(i int) (string, error) {
	n := s.Nodes()
	if i < 0 || i >= len(n) {
		return "", fmt.Errorf("host %s: node %d of a %d-node allocation", s.cfg.Name, i, len(n))
	}
	return n[i], nil
}

// Name is the host's name in the matrix.
func (s *Slurm) Name() string { return s.cfg.Name }
