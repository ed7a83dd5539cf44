package hosts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SlurmConfig is one Slurm host of a sweep: what to ask salloc for, and
// where the allocation is recorded so that a resumed sweep finds it again.
type SlurmConfig struct {
	Name        string // the host's name in the matrix
	JobName     string // the allocation's job name, one per sweep (mbench-<sweep id>)
	JobFile     string // local file recording the allocation (in the results directory)
	Partition   string
	Account     string
	Constraint  string
	TimeLimit   string // Slurm's -t format
	GPUsPerNode int
	CPUsPerStep int      // -c of each engine step (0 = 1)
	Steps       int      // engine steps at once at most: salloc asks that many tasks of CPUsPerStep CPUs (0 = 1)
	Nodes       int      // nodes of the allocation (0 = 1); with several, Steps is per node
	Options     []string // extra salloc options
	StepOptions []string // extra srun options for engine steps
	Warn        io.Writer
}

// SallocArgs is the salloc command line that obtains the allocation: no
// shell, so the allocation holds no step of its own.
func (c SlurmConfig) SallocArgs() []string {
	a := []string{"salloc", "--no-shell", "--job-name=" + c.JobName, "--nodes=" + strconv.Itoa(max(c.Nodes, 1)), "--time=" + c.TimeLimit}
	if c.Nodes > 1 {
		a = append(a, "--ntasks-per-node="+strconv.Itoa(max(c.Steps, 1)))
	} else {
		a = append(a, "--ntasks="+strconv.Itoa(max(c.Steps, 1)))
	}
	a = append(a, "--cpus-per-task="+strconv.Itoa(max(c.CPUsPerStep, 1)))
	if c.Partition != "" {
		a = append(a, "--partition="+c.Partition)
	}
	if c.Account != "" {
		a = append(a, "--account="+c.Account)
	}
	if c.Constraint != "" {
		a = append(a, "--constraint="+c.Constraint)
	}
	if c.GPUsPerNode > 0 {
		a = append(a, "--gres=gpu:"+strconv.Itoa(c.GPUsPerNode))
	}
	return append(a, c.Options...)
}

// StepArgs is the srun command line of an engine step: one task on the
// node, with gpus GPUs of the allocation bound to it by Slurm (--exact, so
// two steps never share a GPU), named after the process.
func (c SlurmConfig) StepArgs(jobID, node, name string, gpus int) []string {
	cpus := max(c.CPUsPerStep, 1)
	a := []string{"srun", "--jobid=" + jobID, "--job-name=" + name, "--nodes=1", "--ntasks=1", "--nodelist=" + node,
		"--cpus-per-task=" + strconv.Itoa(cpus), "--exact", "--kill-on-bad-exit=1"}
	if gpus > 0 {
		a = append(a, "--gres=gpu:"+strconv.Itoa(gpus))
	} else {
		a = append(a, "--gres=none", "--overlap")
	}
	return append(a, c.StepOptions...)
}

// StepCommand is the sh command line that runs command as an engine step
// (see StepArgs): what Start runs on the login machine.
func (c SlurmConfig) StepCommand(jobID, node, name string, gpus int, command string) string {
	return shellJoin(c.StepArgs(jobID, node, name, gpus)) + " sh -c " + quote(command)
}

// EngineStepCommand is StepCommand for a process that records the pid of
// the step's task on the node in nodePidFile before it execs command (see
// NodeProcess): what Start runs.
func (c SlurmConfig) EngineStepCommand(jobID, node, name string, gpus int, command, nodePidFile string) string {
	return c.StepCommand(jobID, node, name, gpus, "echo $$ >"+quotePath(nodePidFile)+" && exec sh -c "+quote(command))
}

// SallocCommand is SallocArgs as one sh command line.
func (c SlurmConfig) SallocCommand() string { return shellJoin(c.SallocArgs()) }

// ErrAllocationEnded is wrapped by errors caused by the sweep's allocation
// having ended (time limit, scancel, node failure).
var ErrAllocationEnded = errors.New("slurm allocation ended")

// slurmRecord is the allocation as recorded in SlurmConfig.JobFile.
type slurmRecord struct {
	JobID    string `json:"job_id"`
	JobName  string `json:"job_name"`
	Node     string `json:"node"`      // the first node
	NodeAddr string `json:"node_addr"` // its address
	// Nodes and NodeAddrs are every node of the allocation and its
	// address, in Slurm's order.
	Nodes     []string  `json:"nodes,omitempty"`
	NodeAddrs []string  `json:"node_addrs,omitempty"`
	Granted   time.Time `json:"granted"`
}

// Slurm is a Host whose processes are job steps of one Slurm allocation.
// Commands, files and pidfiles are on the login machine (login), which
// runs srun; the compute node must share the filesystem of the paths used.
type Slurm struct {
	Host // the login machine: Run, Put, Get, Size, Forward
	cfg  SlurmConfig
	rec  slurmRecord
}

// AllocateSlurm returns the Slurm host of cfg: it reuses the allocation
// recorded in cfg.JobFile when Slurm still runs it under cfg.JobName
// (cancelling steps an earlier mbench left in it), else runs salloc and
// records the new allocation. Reused says which.
func AllocateSlurm(ctx context.Context, login Host, cfg SlurmConfig) (s *Slurm, reused bool, err error) {
	s = &Slurm{Host: login, cfg: cfg}
	if data, err := os.ReadFile(cfg.JobFile); err == nil {
		var rec slurmRecord
		if json.Unmarshal(data, &rec) == nil && rec.JobID != "" {
			name, state, err := s.query(ctx, rec.JobID)
			switch {
			case err != nil:
				return nil, false, err
			case name == cfg.JobName && state == "RUNNING":
				s.rec = rec
				if err := s.cancelSteps(ctx, ""); err != nil {
					return nil, false, err
				}
				return s, true, nil
			case cfg.Warn != nil:
				fmt.Fprintf(cfg.Warn, "host %s: slurm job %s of this sweep is %s; asking for a new allocation\n", cfg.Name, rec.JobID, orGone(state))
			}
		}
	}
	if err := s.allocate(ctx); err != nil {
		return nil, false, err
	}
	return s, false, nil
}

var grantedRE = regexp.MustCompile(`[Gg]ranted job allocation ([0-9]+)`)

func (s *Slurm) allocate(ctx context.Context) error {
	out, _, err := s.Host.Run(ctx, shellJoin(s.cfg.SallocArgs())+" </dev/null 2>&1")
	m := grantedRE.FindSubmatch(out)
	if err != nil || m == nil {
		// A salloc killed while pending may leave its request queued: take
		// back every job of this sweep's name (no live one is recorded).
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _, _ = s.Host.Run(cctx, "scancel --name="+quote(s.cfg.JobName))
		if err == nil {
			err = fmt.Errorf("no job id in its output: %s", strings.TrimSpace(string(out)))
		}
		return fmt.Errorf("host %s: %s: %w", s.cfg.Name, shellJoin(s.cfg.SallocArgs()), err)
	}
	s.rec = slurmRecord{JobID: string(m[1]), JobName: s.cfg.JobName, Granted: time.Now().UTC()}
	if err := s.findNodes(ctx); err != nil {
		s.release(ctx)
		return fmt.Errorf("host %s: find the nodes of slurm job %s: %w", s.cfg.Name, s.rec.JobID, err)
	}
	data, _ := json.MarshalIndent(s.rec, "", "  ")
	if err := writeFileAtomic(s.cfg.JobFile, append(data, '\n')); err != nil {
		s.release(ctx)
		return fmt.Errorf("host %s: record slurm job %s: %w", s.cfg.Name, s.rec.JobID, err)
	}
	return nil
}

// findNodes records the allocation's nodes, in Slurm's order, and the
// address of each (Slurm's NodeAddr).
func (s *Slurm) findNodes(ctx context.Context) error {
	out, _, err := s.Host.Run(ctx, "scontrol show hostnames \"$(squeue -h -j "+quote(s.rec.JobID)+" -o %N)\"")
	if err != nil {
		return err
	}
	for _, n := range strings.Fields(string(out)) {
		info, _, err := s.Host.Run(ctx, "scontrol -o show node "+quote(n))
		if err != nil {
			return err
		}
		addr := n
		for _, f := range strings.Fields(string(info)) {
			if a, ok := strings.CutPrefix(f, "NodeAddr="); ok && a != "" {
				addr = a
			}
		}
		s.rec.Nodes, s.rec.NodeAddrs = append(s.rec.Nodes, n), append(s.rec.NodeAddrs, addr)
	}
	if len(s.rec.Nodes) == 0 {
		return errors.New("squeue lists no node")
	}
	if want := max(s.cfg.Nodes, 1); len(s.rec.Nodes) != want {
		return fmt.Errorf("Slurm granted %d node(s) (%s), %d asked", len(s.rec.Nodes), strings.Join(s.rec.Nodes, ","), want)
	}
	s.rec.Node, s.rec.NodeAddr = s.rec.Nodes[0], s.rec.NodeAddrs[0]
	return nil
}

// JobID is the allocation's job id.
func (s *Slurm) JobID() string { return s.rec.JobID }

// Node is the allocated node's name (the first node's, of several).
func (s *Slurm) Node() string { return s.rec.Node }

// NodeAddr is the address at which the node is reached (Slurm's NodeAddr).
func (s *Slurm) NodeAddr() string { return s.rec.NodeAddr }

// Nodes are the allocation's nodes, in Slurm's order: a process's
// ProcSpec.Node indexes them.
func (s *Slurm) Nodes() []string {
	if len(s.rec.Nodes) == 0 { // a record of a one-node allocation
		return []string{s.rec.Node}
	}
	return s.rec.Nodes
}

// NodeAddrOf is the address of node i of the allocation.
func (s *Slurm) NodeAddrOf(i int) string {
	if len(s.rec.NodeAddrs) == 0 {
		return s.rec.NodeAddr
	}
	return s.rec.NodeAddrs[i]
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

// query returns the job's name and state ("" when Slurm no longer knows it).
func (s *Slurm) query(ctx context.Context, jobID string) (name, state string, err error) {
	out, stderr, err := s.Host.Run(ctx, "squeue -h -t all -j "+quote(jobID)+" -o '%j|%T|%e'")
	if err != nil {
		if strings.Contains(string(stderr), "Invalid job id") {
			return "", "", nil
		}
		return "", "", fmt.Errorf("host %s: squeue: %w", s.cfg.Name, err)
	}
	name, rest, _ := strings.Cut(lastLine(out), "|")
	state, end, _ := strings.Cut(rest, "|")
	if state == "RUNNING" && pastEnd(end, time.Now()) {
		// For a few seconds after its time limit Slurm still lists the job
		// RUNNING while refusing new steps ("Job/step already completing
		// or completed"): it is not running any more for mbench.
		state = stateOverTime
	}
	return name, state, nil
}

// stateOverTime is query's state of a job listed RUNNING past its end time.
const stateOverTime = "RUNNING past its time limit"

// pastEnd reports whether squeue's end time (%e, the controller's local
// time, or Unknown/N/A without a limit) is at or before now.
func pastEnd(end string, now time.Time) bool {
	t, err := time.ParseInLocation("2006-01-02T15:04:05", strings.TrimSpace(end), time.Local)
	return err == nil && !now.Before(t)
}

// Alive returns nil while the allocation runs, else an error wrapping
// ErrAllocationEnded that says what became of it (a job past its time limit
// or completing is waited for until Slurm gives its final state, such as
// TIMEOUT, for up to 30 s).
func (s *Slurm) Alive(ctx context.Context) error {
	_, state, err := s.query(ctx, s.rec.JobID)
	for wait := time.Duration(0); err == nil && (state == stateOverTime || state == "COMPLETING") && wait < 30*time.Second; wait += 500 * time.Millisecond {
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return err
		}
		_, state, err = s.query(ctx, s.rec.JobID)
	}
	if err != nil || state == "RUNNING" {
		return err
	}
	return fmt.Errorf("%w: job %s (%s) on %s is %s; `mbench resume` asks for a new one",
		ErrAllocationEnded, s.rec.JobID, s.rec.JobName, strings.Join(s.Nodes(), ","), orGone(state))
}

func orGone(state string) string {
	if state == "" {
		return "gone"
	}
	return state
}

// steps returns the ids (job.step) of the allocation's steps named name,
// or of all its steps for "".
func (s *Slurm) steps(ctx context.Context, name string) ([]string, error) {
	out, stderr, err := s.Host.Run(ctx, "squeue -h -s -j "+quote(s.rec.JobID)+" -o '%i|%j'")
	if err != nil {
		if strings.Contains(string(stderr), "Invalid job id") {
			return nil, nil
		}
		return nil, fmt.Errorf("host %s: squeue -s: %w", s.cfg.Name, err)
	}
	var ids []string
	for _, l := range strings.Split(string(out), "\n") {
		id, n, ok := strings.Cut(strings.TrimSpace(l), "|")
		if ok && (name == "" || n == name) && strings.HasPrefix(id, s.rec.JobID+".") {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// cancelSteps cancels the allocation's steps named name ("" = all) and
// waits until squeue no longer lists them, or ctx ends.
func (s *Slurm) cancelSteps(ctx context.Context, name string) error {
	ids, err := s.steps(ctx, name)
	if err != nil || len(ids) == 0 {
		return err
	}
	if _, _, err := s.Host.Run(ctx, "scancel "+strings.Join(ids, " ")); err != nil {
		return fmt.Errorf("host %s: scancel %s: %w", s.cfg.Name, strings.Join(ids, " "), err)
	}
	wait := 20 * time.Millisecond
	for {
		left, err := s.steps(ctx, name)
		if err != nil {
			return err
		}
		left = slices.DeleteFunc(left, func(id string) bool { return !slices.Contains(ids, id) })
		if len(left) == 0 {
			return nil
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return fmt.Errorf("host %s: slurm steps %s still listed by squeue after scancel: %w", s.cfg.Name, strings.Join(left, " "), err)
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// stepTarget checks, before a step of spec starts, that the allocation
// still runs, and returns the node it runs on and the file where the step
// records its task's pid on the node.
func (s *Slurm) stepTarget(ctx context.Context, spec ProcSpec) (node, nodePid string, err error) {
	if err := s.Alive(ctx); err != nil {
		return "", "", fmt.Errorf("start %s on %s: %w", spec.Name, s.cfg.Name, err)
	}
	if node, err = s.node(spec.Node); err != nil {
		return "", "", err
	}
	return node, stateFile(spec, ".nodepid"), nil
}

// Start runs spec as a job step of the allocation: srun, started on the
// login machine like any process (pidfile, log), runs spec.Command on the
// node with spec.GPUs GPUs bound by Slurm. The environment reaches the step
// through srun's default --export=ALL.
func (s *Slurm) Start(ctx context.Context, spec ProcSpec) (Process, error) {
	node, nodePid, err := s.stepTarget(ctx, spec)
	if err != nil {
		return nil, err
	}
	inner := spec
	inner.Command = "rm -f " + quotePath(nodePid) + " && exec " + s.cfg.EngineStepCommand(s.rec.JobID, node, spec.Name, spec.GPUs, spec.Command, nodePid)
	p, err := s.Host.Start(ctx, inner)
	if err != nil {
		return nil, err
	}
	return &slurmProc{Process: p, s: s, name: spec.Name, nodePidFile: nodePid}, nil
}

// RunOnNode runs cmd on node i of the allocation as a step that shares the
// allocation's resources (--overlap) and binds no GPU.
func (s *Slurm) RunOnNode(ctx context.Context, i int, cmd string) ([]byte, []byte, error) {
	node, err := s.node(i)
	if err != nil {
		return nil, nil, err
	}
	a := []string{"srun", "--jobid=" + s.rec.JobID, "--job-name=mbench-run", "--nodes=1", "--ntasks=1",
		"--nodelist=" + node, "--overlap", "--gres=none", "sh", "-c", cmd}
	return s.Host.Run(ctx, shellJoin(a))
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

// RunOnNodeGPUs runs cmd on node i as a step named name that sees every
// GPU of the allocation there (OverlapArgs), and returns its output.
func (s *Slurm) RunOnNodeGPUs(ctx context.Context, i int, name, cmd string) ([]byte, []byte, error) {
	node, err := s.node(i)
	if err != nil {
		return nil, nil, err
	}
	a := append(s.cfg.OverlapArgs(s.rec.JobID, node, name), "sh", "-c", cmd)
	return s.Host.Run(ctx, shellJoin(a))
}

// StartOnNode starts spec as a long-lived step that sees every GPU of the
// allocation (OverlapArgs) without taking them from the engine steps: a
// probe. Its files are on the login machine's filesystem, as for Start. It
// returns once the step's task runs on the node (srun takes a while to get
// there), so that what follows is inside the probe's window.
func (s *Slurm) StartOnNode(ctx context.Context, spec ProcSpec) (Process, error) {
	node, nodePid, err := s.stepTarget(ctx, spec)
	if err != nil {
		return nil, err
	}
	inner := spec
	inner.Command = "rm -f " + quotePath(nodePid) + " && exec " + shellJoin(s.cfg.OverlapArgs(s.rec.JobID, node, spec.Name)) +
		" sh -c " + quote("echo $$ >"+quotePath(nodePid)+" && exec sh -c "+quote(spec.Command))
	p, err := s.Host.Start(ctx, inner)
	if err != nil {
		return nil, err
	}
	sp := &slurmProc{Process: p, s: s, name: spec.Name, nodePidFile: nodePid}
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		if _, err := sp.NodePid(ctx); err == nil {
			return sp, nil
		}
		select {
		case <-p.Done():
			serr := sp.Stop(context.WithoutCancel(ctx), time.Second)
			return nil, errors.Join(fmt.Errorf("host %s: step %s ended before its task ran: %v: %s", s.cfg.Name, spec.Name, p.Err(), p.LogTail(ctx, 3)), serr)
		case <-ctx.Done():
			serr := sp.Stop(context.WithoutCancel(ctx), time.Second)
			return nil, errors.Join(fmt.Errorf("host %s: step %s: its task did not start: %w", s.cfg.Name, spec.Name, ctx.Err()), serr)
		case <-time.After(wait):
		}
	}
}

// Close cancels the allocation (every step goes with it), waits until
// Slurm no longer runs it, forgets the record and closes the login host.
func (s *Slurm) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := s.release(ctx)
	return errors.Join(err, s.Host.Close())
}

func (s *Slurm) release(ctx context.Context) error {
	if s.rec.JobID == "" {
		return nil
	}
	if _, _, err := s.Host.Run(ctx, "scancel "+quote(s.rec.JobID)); err != nil {
		return fmt.Errorf("host %s: scancel %s: %w", s.cfg.Name, s.rec.JobID, err)
	}
	wait := 20 * time.Millisecond
	for {
		_, state, err := s.query(ctx, s.rec.JobID)
		if err != nil {
			return err
		}
		if state != "RUNNING" && state != "PENDING" && state != "COMPLETING" && state != "CONFIGURING" {
			break
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return fmt.Errorf("host %s: slurm job %s still %s after scancel: %w", s.cfg.Name, s.rec.JobID, state, err)
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
	if err := os.Remove(s.cfg.JobFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// slurmProc is srun on the login machine, standing for its job step.
type slurmProc struct {
	Process
	s           *Slurm
	name        string
	nodePidFile string // where the step's task wrote its pid on the node ("" = not recorded)

	mu      sync.Mutex
	nodePid int
}

// NodeProcess is a process whose Pid is not where it runs: a Slurm job
// step, whose Pid is srun's on the login machine.
type NodeProcess interface {
	// NodePid is the pid of the step's task on the compute node (the
	// leader of its own process group there, whose descendants are the
	// engine's processes); 0 and an error until the task has recorded it.
	NodePid(ctx context.Context) (int, error)
}

// NodePid implements NodeProcess: the step's task writes its pid to a file
// next to srun's pidfile before it execs the command, which mbench reads
// once through the login machine (the filesystem is shared).
func (p *slurmProc) NodePid(ctx context.Context) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nodePid > 0 || p.nodePidFile == "" {
		return p.nodePid, nil
	}
	var b strings.Builder
	if _, err := p.s.Host.Get(ctx, p.nodePidFile, 0, &b); err != nil {
		return 0, fmt.Errorf("host %s: node pid of step %s: %w", p.s.cfg.Name, p.name, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(b.String()))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("host %s: node pid of step %s: %q in %s", p.s.cfg.Name, p.name, b.String(), p.nodePidFile)
	}
	p.nodePid = n
	return n, nil
}

// Stop cancels the step through Slurm (SIGTERM, then SIGKILL after the
// cluster's KillWait), waits up to grace for srun to end, stops srun itself
// if it has not, and checks with squeue that the step is gone.
func (p *slurmProc) Stop(ctx context.Context, grace time.Duration) error {
	ids, err := p.s.steps(ctx, p.name)
	if err == nil && len(ids) > 0 {
		_, _, err = p.s.Host.Run(ctx, "scancel "+strings.Join(ids, " "))
	}
	if err == nil && len(ids) > 0 {
		t := time.NewTimer(grace)
		select {
		case <-p.Done():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	serr := p.Process.Stop(ctx, grace)
	return errors.Join(err, serr, p.s.cancelSteps(ctx, p.name))
}

// shellJoin quotes each argument for sh.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = quote(a)
	}
	return strings.Join(q, " ")
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// writeFileAtomic writes a local file through a temporary file and rename.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
