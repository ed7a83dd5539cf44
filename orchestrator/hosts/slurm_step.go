package hosts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mbench/mbench/internal/clock"
	"github.com/mbench/mbench/shquote"
)

// slurmOwnSteps are the steps of a job that are not mbench's to cancel:
// the batch script that holds the allocation, and the steps Slurm itself
// adds.
var slurmOwnSteps = []string{"batch", "extern", "interactive"}

// steps returns the ids (job.step) of the allocation's steps named name,
// or of all the steps mbench may cancel for "" (inside an allocation, only
// those named as mbench names its processes).
func (s *Slurm) steps(ctx context.Context, name string) ([]string, error) {
	out, stderr, err := s.Host.Run(ctx, "squeue -h -s -j "+shquote.Quote(s.rec.JobID)+" -o '%i|%j'")
	if err != nil {
		if strings.Contains(string(stderr), "Invalid job id") {
			return nil, nil
		}
		return nil, fmt.Errorf("host %s: squeue -s: %w", s.cfg.Name, err)
	}
	var ids []string
	for _, l := range strings.Split(string(out), "\n") {
		id, n, ok := strings.Cut(strings.TrimSpace(l), "|")
		step, isStep := strings.CutPrefix(id, s.rec.JobID+".")
		if !ok || !isStep || slices.Contains(slurmOwnSteps, step) {
			continue
		}
		if name == "" && s.cfg.Inside != "" && !mbenchStep(n) {
			continue // the user's own step in their allocation (mbench's, say)
		}
		if name == "" || n == name {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// mbenchStep reports whether a step name is one mbench gives its steps.
func mbenchStep(name string) bool {
	return slices.ContainsFunc([]string{"engine-", "router-", "probe-", "gate-", "mbench-"}, func(p string) bool { return strings.HasPrefix(name, p) })
}

// cancelSteps cancels all of mbench's steps of the allocation and waits
// until squeue no longer lists them, or ctx ends.
func (s *Slurm) cancelSteps(ctx context.Context) error {
	ids, err := s.steps(ctx, "")
	if err != nil || len(ids) == 0 {
		return err
	}
	_, _, err = s.Host.Run(ctx, "scancel "+strings.Join(ids, " "))
	if werr := s.waitStepsGone(ctx, "", ids); werr != nil {
		return errors.Join(werr, err)
	}
	return nil // an error of scancel for a step that ended meanwhile does not matter
}

// waitStepsGone waits until squeue lists none of ids (steps named name).
func (s *Slurm) waitStepsGone(ctx context.Context, name string, ids []string) error {
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
		if err := clock.Sleep(ctx, wait); err != nil {
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
	return &slurmProc{Process: p, s: s, name: spec.Name, node: spec.Node, nodePidFile: nodePid, marker: spec.Marker}, nil
}

// RunOnNode implements NodeHost: a step that shares the allocation's
// resources (--overlap) and binds no GPU.
func (s *Slurm) RunOnNode(ctx context.Context, i int, cmd string) ([]byte, []byte, error) {
	node, err := s.node(i)
	if err != nil {
		return nil, nil, err
	}
	a := []string{"srun", "--jobid=" + s.rec.JobID, "--job-name=mbench-run", "--nodes=1", "--ntasks=1",
		"--nodelist=" + node, "--overlap", "--gres=none", "sh", "-c", cmd}
	return s.Host.Run(ctx, shquote.Join(a))
}

// RunOnNodeGPUs implements NodeHost (OverlapArgs).
func (s *Slurm) RunOnNodeGPUs(ctx context.Context, i int, name, cmd string) ([]byte, []byte, error) {
	node, err := s.node(i)
	if err != nil {
		return nil, nil, err
	}
	a := append(s.cfg.OverlapArgs(s.rec.JobID, node, name), "sh", "-c", cmd)
	return s.Host.Run(ctx, shquote.Join(a))
}

// StartOnNode implements NodeHost: a long-lived step that sees every GPU
// of the allocation (OverlapArgs) without taking them from the engine
// steps. Its files are on the login machine's filesystem, as for Start. It
// returns once the step's task runs on the node (srun takes a while to get
// there), so that what follows is inside the probe's window.
func (s *Slurm) StartOnNode(ctx context.Context, spec ProcSpec) (Process, error) {
	node, nodePid, err := s.stepTarget(ctx, spec)
	if err != nil {
		return nil, err
	}
	inner := spec
	inner.Command = "rm -f " + quotePath(nodePid) + " && exec " + shquote.Join(s.cfg.OverlapArgs(s.rec.JobID, node, spec.Name)) +
		" sh -c " + shquote.Quote(nodeTask(spec.Command, nodePid))
	p, err := s.Host.Start(ctx, inner)
	if err != nil {
		return nil, err
	}
	sp := &slurmProc{Process: p, s: s, name: spec.Name, node: spec.Node, nodePidFile: nodePid, marker: spec.Marker}
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

// slurmProc is srun on the login machine, standing for its job step.
type slurmProc struct {
	Process
	s           *Slurm
	name        string
	node        int
	nodePidFile string // where the step's task wrote its pid on the node ("" = not recorded)
	marker      string

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

// Stop stops the step through Slurm as a cluster stops a job: SIGTERM to
// its tasks (scancel --signal=TERM), up to grace for them to end (srun
// exits with its step), then a plain scancel, which kills at once. It
// sweeps the node for processes the step left there (reapScript: children
// that escaped Slurm's tracking, as setsid'd ones do under
// proctrack/linuxproc), verifying that none survives, checks with squeue
// that the step is gone, and stops srun itself if it has not ended. grace
// is cut so that the kill and the checks fit before ctx's deadline.
func (p *slurmProc) Stop(ctx context.Context, grace time.Duration) error {
	// scancel's exit status says little here: a step may end between
	// squeue listing it and scancel (its engine obeyed the SIGTERM), and on
	// Slurm 22.05 `scancel --signal=TERM J.S` of a step of a multi-node job
	// fails with "Kill job error on job step id J: Invalid job id
	// specified" although the step's tasks got the signal. What counts is
	// that the step ends, or squeue stops listing it (cancelSteps).
	if ids, err := p.s.steps(ctx, p.name); err == nil && len(ids) > 0 && grace > 0 {
		_, _, _ = p.s.Host.Run(ctx, "scancel --signal=TERM "+strings.Join(ids, " "))
		p.waitEnded(ctx, grace)
	}
	// What outlived the grace: scancel kills at once. The node is swept
	// before waiting for squeue to drop the step: Slurm keeps a step
	// listed while a process it lost track of lives (for up to a minute:
	// UnkillableStepTimeout), and the sweep kills it.
	ids, err := p.s.steps(ctx, p.name)
	if err == nil && len(ids) > 0 {
		_, _, _ = p.s.Host.Run(ctx, "scancel "+strings.Join(ids, " "))
	}
	rerr := p.s.reap(ctx, p.node, procTag(p.marker, p.name), grace)
	if err == nil {
		err = p.s.waitStepsGone(ctx, p.name, ids)
	}
	serr := p.Process.Stop(ctx, min(grace, time.Second))
	return errors.Join(err, rerr, serr)
}

// waitEnded waits until srun has ended (its step has), grace has passed,
// or only killReserve of ctx's deadline is left.
func (p *slurmProc) waitEnded(ctx context.Context, grace time.Duration) {
	if dl, ok := ctx.Deadline(); ok {
		grace = min(grace, time.Until(dl)-min(killReserve, time.Until(dl)/2))
	}
	if grace <= 0 {
		return
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.Done():
	case <-t.C:
	case <-ctx.Done():
	}
}

// reap sweeps node i for processes tagged with the node tag of tag (what a
// step left behind): SIGTERM, grace, SIGKILL, and an error naming any
// survivor. One step (RunOnNode) does it all.
func (s *Slurm) reap(ctx context.Context, i int, tag string, grace time.Duration) error {
	out, _, err := s.RunOnNode(ctx, i, reapScript(nodeTag(tag), min(grace, 2*time.Second)))
	if err != nil {
		if aerr := s.Alive(ctx); errors.Is(aerr, ErrAllocationEnded) {
			return nil // the allocation's end took the node's processes with it
		}
		return fmt.Errorf("host %s: sweep node %d for what step %s left: %w", s.cfg.Name, i, tag, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "mbench-reaped "); ok {
			s.warnf("host %s: stopped processes step %s left on node %d: %s", s.cfg.Name, tag, i, v)
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "mbench-survivors "); ok {
			return fmt.Errorf("host %s: processes of step %s still alive on node %d after SIGKILL: %s", s.cfg.Name, tag, i, v)
		}
	}
	return nil
}

// reapScript is the node-side sweep of reap.
func reapScript(tag string, grace time.Duration) string {
	return shLib + fmt.Sprintf(`
mb_tagged %[1]s
[ -z "$mb_tl" ] && exit 0
echo "mbench-reaped $mb_tl"
kill -s TERM $mb_tl 2>/dev/null
mb_i=0
while [ "$mb_i" -lt %[2]d ]; do
	mb_tagged %[1]s; [ -z "$mb_tl" ] && exit 0
	sleep 0.1; mb_i=$((mb_i+1))
done
mb_i=0
while [ "$mb_i" -lt 100 ]; do
	mb_tagged %[1]s; [ -z "$mb_tl" ] && exit 0
	kill -s KILL $mb_tl 2>/dev/null
	sleep 0.1; mb_i=$((mb_i+1))
done
echo "mbench-survivors $mb_tl"
`, shquote.Quote(tag), graceTicks(grace))
}
