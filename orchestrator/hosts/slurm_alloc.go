package hosts

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mbench/mbench/internal/clock"
	"github.com/mbench/mbench/internal/durable"
	"github.com/mbench/mbench/shquote"
)

// AllocateSlurm returns the Slurm host of cfg. Inside an allocation
// (cfg.Inside) it uses that one. Otherwise it reuses the allocation
// recorded in cfg.JobFile while Slurm still runs it under cfg.JobName
// (cancelling steps an earlier mbench left in it), waits for it while it
// is pending, cancels it when it is suspended; else it submits a new one,
// records it at once, and waits until it runs, saying on cfg.Warn which job
// it waits for, why and for how long. Reused says whether the allocation
// existed before.
func AllocateSlurm(ctx context.Context, login Host, cfg SlurmConfig) (s *Slurm, reused bool, err error) {
	s = &Slurm{Host: login, cfg: cfg}
	if cfg.Inside != "" {
		return s, true, s.adopt(ctx)
	}
	if data, err := os.ReadFile(cfg.JobFile); err == nil {
		var rec slurmRecord
		if json.Unmarshal(data, &rec) == nil && rec.JobID != "" {
			j, err := s.query(ctx, rec.JobID)
			switch {
			case err != nil:
				return nil, false, err
			case j.name == cfg.JobName && (j.state == "RUNNING" || pending(j.state)):
				s.rec = rec
				if err := s.waitRunning(ctx); err != nil {
					return nil, false, err
				}
				if len(s.rec.Nodes) == 0 {
					if err := s.granted(ctx); err != nil {
						return nil, false, err
					}
				}
				if err := s.cancelSteps(ctx); err != nil {
					return nil, false, err
				}
				return s, true, nil
			case j.name == cfg.JobName && j.state == "SUSPENDED":
				// Suspended by an admin or a preemption: its engines cannot
				// run until someone resumes it. It is not left holding
				// nodes for nothing.
				s.rec = rec
				s.warnf("host %s: slurm job %s of this sweep is SUSPENDED; cancelling it and asking for a new allocation", cfg.Name, rec.JobID)
				if err := s.release(ctx); err != nil {
					return nil, false, err
				}
				s.rec = slurmRecord{}
			default:
				s.warnf("host %s: slurm job %s of this sweep is %s; asking for a new allocation", cfg.Name, rec.JobID, cmp.Or(j.state, "gone"))
			}
		}
	}
	if err := s.submit(ctx); err != nil {
		return nil, false, err
	}
	return s, false, nil
}

func (s *Slurm) warnf(format string, args ...any) {
	if s.cfg.Warn != nil {
		fmt.Fprintf(s.cfg.Warn, format+"\n", args...)
	}
}

// adopt takes the allocation mbench runs in (cfg.Inside) as the host's.
func (s *Slurm) adopt(ctx context.Context) error {
	s.rec = slurmRecord{JobID: s.cfg.Inside}
	j, err := s.query(ctx, s.cfg.Inside)
	if err != nil {
		return err
	}
	if j.state != "RUNNING" {
		return fmt.Errorf("host %s: mbench runs inside slurm job %s (SLURM_JOB_ID), which is %s", s.cfg.Name, s.cfg.Inside, cmp.Or(j.state, "gone"))
	}
	s.rec.JobName = j.name
	if err := s.findNodes(ctx, true); err != nil {
		return fmt.Errorf("host %s: the nodes of slurm job %s (mbench runs inside it): %w", s.cfg.Name, s.cfg.Inside, err)
	}
	return s.cancelSteps(ctx) // steps an earlier mbench left in it
}

// submit asks Slurm for the allocation, records it and waits until it runs.
func (s *Slurm) submit(ctx context.Context) error {
	cmd := s.cfg.SbatchCommand()
	out, _, err := s.Host.Run(ctx, cmd+" </dev/null")
	if err != nil {
		// sbatch's own message (the partition, the node configuration it
		// cannot satisfy) is in the error.
		return fmt.Errorf("host %s: Slurm refused the allocation: %s: %w", s.cfg.Name, cmd, err)
	}
	id, _, _ := strings.Cut(LastLine(out), ";")
	if _, err := strconv.Atoi(id); err != nil {
		return fmt.Errorf("host %s: %s: no job id in its output: %q", s.cfg.Name, cmd, out)
	}
	s.rec, s.ended = slurmRecord{JobID: id, JobName: s.cfg.JobName, Submitted: time.Now().UTC()}, false
	// Recorded before the wait: a resumed mbench finds the job, pending or
	// not, instead of asking for a second one.
	if err := s.writeRecord(); err != nil {
		return errors.Join(err, s.releaseNow(ctx))
	}
	if err := s.waitRunning(ctx); err != nil {
		return errors.Join(err, s.releaseNow(ctx))
	}
	if err := s.granted(ctx); err != nil {
		return errors.Join(err, s.releaseNow(ctx))
	}
	return nil
}

// granted records the nodes and cluster of the allocation once it runs.
func (s *Slurm) granted(ctx context.Context) error {
	if err := s.findNodes(ctx, false); err != nil {
		return fmt.Errorf("host %s: find the nodes of slurm job %s: %w", s.cfg.Name, s.rec.JobID, err)
	}
	s.rec.Granted = time.Now().UTC()
	return s.writeRecord()
}

func (s *Slurm) writeRecord() error {
	data, _ := json.MarshalIndent(s.rec, "", "  ")
	if err := durable.WriteFile(s.cfg.JobFile, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("host %s: record slurm job %s: %w", s.cfg.Name, s.rec.JobID, err)
	}
	return nil
}

// releaseNow is release within a bounded time even after ctx is cancelled
// (an interrupted wait must not leave its job queued).
func (s *Slurm) releaseNow(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return s.release(cctx)
}

// pending reports whether a job state is one that becomes RUNNING.
func pending(state string) bool {
	return state == "PENDING" || state == "CONFIGURING" || state == "REQUEUED" || state == "RESIZING"
}

// neverRuns reports whether a pending job's reason says it cannot run
// until an administrator changes a limit: the request exceeds what its
// partition, account or QOS allows for one job (a cluster without
// EnforcePartLimits accepts such a job and keeps it pending for ever).
// Reasons that pass by themselves (Resources, Priority, a node down, a
// group's running limits) are waited for.
func neverRuns(reason string) bool {
	switch reason {
	case "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "InvalidAccount", "InvalidQOS":
		return true
	}
	for _, p := range []string{"QOSMax", "AssocMax"} {
		if strings.HasPrefix(reason, p) && strings.Contains(reason, "PerJob") {
			return true
		}
	}
	return false
}

// pendingNote is how often at most waitRunning repeats that a job is still
// pending for the same reason; a new reason is said at once.
const pendingNote = 15 * time.Second

// waitRunning waits until the recorded job runs. While it is pending it
// says, after the first couple of seconds, the job id, Slurm's reason and
// how long it has waited; past cfg.MaxWait it gives up (the caller cancels
// the job). A job that ends before it runs is an error with its state and
// reason.
func (s *Slurm) waitRunning(ctx context.Context) error {
	t0 := time.Now()
	said, lastReason := time.Time{}, ""
	poll := 100 * time.Millisecond
	for {
		j, err := s.query(ctx, s.rec.JobID)
		if err != nil {
			return err
		}
		waited := time.Since(t0)
		switch {
		case j.state == "RUNNING":
			if !said.IsZero() {
				s.warnf("host %s: slurm job %s running after %s pending", s.cfg.Name, s.rec.JobID, waited.Round(time.Second))
			}
			return nil
		case pending(j.state) && neverRuns(j.reason):
			return fmt.Errorf("host %s: slurm job %s can never run as asked: it is %s (reason: %s, a limit of the partition, account or QOS it exceeds); mbench cancels it",
				s.cfg.Name, s.rec.JobID, j.state, j.reason)
		case !pending(j.state):
			why := ""
			if j.reason != "" && j.reason != "None" {
				why = " (" + j.reason + ")"
			}
			return fmt.Errorf("host %s: slurm job %s is %s%s: it never ran", s.cfg.Name, s.rec.JobID, cmp.Or(j.state, "gone"), why)
		case s.cfg.MaxWait > 0 && waited >= s.cfg.MaxWait:
			return fmt.Errorf("host %s: slurm job %s still %s after %s (reason: %s); max_wait is %s, so mbench cancels it",
				s.cfg.Name, s.rec.JobID, j.state, waited.Round(time.Second), j.reason, s.cfg.MaxWait)
		case waited >= 2*time.Second && (j.reason != lastReason || time.Since(said) >= pendingNote):
			s.warnf("host %s: slurm job %s (%s) %s (reason: %s) for %s", s.cfg.Name, s.rec.JobID, s.rec.JobName,
				strings.ToLower(j.state), j.reason, waited.Round(time.Second))
			said, lastReason = time.Now(), j.reason
		}
		if err := clock.Sleep(ctx, poll); err != nil {
			return fmt.Errorf("host %s: waiting for slurm job %s: %w", s.cfg.Name, s.rec.JobID, err)
		}
		poll = min(poll*3/2, 2*time.Second)
	}
}

// findNodes records the allocation's nodes, in Slurm's order, the address
// of each (Slurm's NodeAddr) and the cluster's name. Inside an allocation
// it takes its first cfg.Nodes nodes; otherwise the job must have exactly
// that many.
func (s *Slurm) findNodes(ctx context.Context, inside bool) error {
	out, _, err := s.Host.Run(ctx, "scontrol show hostnames \"$(squeue -h -j "+shquote.Quote(s.rec.JobID)+" -o %N)\"")
	if err != nil {
		return err
	}
	names := strings.Fields(string(out))
	want := max(s.cfg.Nodes, 1)
	switch {
	case len(names) == 0:
		return errors.New("squeue lists no node")
	case inside && len(names) < want:
		return fmt.Errorf("the allocation has %d node(s) (%s), the matrix asks %d", len(names), strings.Join(names, ","), want)
	case inside:
		names = names[:want]
	case len(names) != want:
		return fmt.Errorf("Slurm granted %d node(s) (%s), %d asked", len(names), strings.Join(names, ","), want)
	}
	s.rec.Nodes, s.rec.NodeAddrs = nil, nil
	for _, n := range names {
		info, _, err := s.Host.Run(ctx, "scontrol -o show node "+shquote.Quote(n))
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
	s.rec.Node, s.rec.NodeAddr = s.rec.Nodes[0], s.rec.NodeAddrs[0]
	if cfg, _, err := s.Host.Run(ctx, "scontrol show config"); err == nil {
		for _, l := range strings.Split(string(cfg), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok && strings.TrimSpace(k) == "ClusterName" {
				s.rec.Cluster = strings.TrimSpace(v)
			}
		}
	}
	return nil
}

// jobInfo is one job as squeue lists it.
type jobInfo struct {
	name, state, reason string
	left                string // time left (%L): [days-][hours:]minutes:seconds, UNLIMITED, NOT_SET or INVALID
}

// query returns the job as squeue lists it (state "" when Slurm no longer
// knows it). Its time left is squeue's own reckoning against the
// controller's clock, so nothing depends on time zones or on this
// machine's clock: a RUNNING job with none left is listed as
// stateOverTime.
func (s *Slurm) query(ctx context.Context, jobID string) (jobInfo, error) {
	out, stderr, err := s.Host.Run(ctx, "squeue -h -t all -j "+shquote.Quote(jobID)+" -o '%j|%T|%r|%L'")
	if err != nil {
		if strings.Contains(string(stderr), "Invalid job id") {
			return jobInfo{}, nil
		}
		return jobInfo{}, fmt.Errorf("host %s: squeue: %w", s.cfg.Name, err)
	}
	if strings.TrimSpace(string(out)) == "" {
		return jobInfo{}, nil
	}
	f := strings.SplitN(LastLine(out), "|", 4)
	for len(f) < 4 {
		f = append(f, "")
	}
	j := jobInfo{name: f[0], state: f[1], reason: f[2], left: f[3]}
	if j.state == "RUNNING" && noTimeLeft(j.left) {
		// For a few seconds after its time limit Slurm still lists the job
		// RUNNING while refusing new steps ("Job/step already completing
		// or completed"): it is not running any more for mbench.
		j.state = stateOverTime
	}
	return j, nil
}

// stateOverTime is query's state of a job listed RUNNING past its time limit.
const stateOverTime = "RUNNING past its time limit"

// noTimeLeft reports whether squeue's time left (%L) says the job has
// reached its limit: 0:00, or INVALID (a limit already passed).
func noTimeLeft(left string) bool {
	left = strings.TrimSpace(left)
	if left == "INVALID" {
		return true
	}
	d, ok := parseSlurmDuration(left)
	return ok && d <= 0
}

// parseSlurmDuration parses Slurm's [days-][hours:]minutes:seconds.
func parseSlurmDuration(v string) (time.Duration, bool) {
	days := 0
	if d, rest, ok := strings.Cut(v, "-"); ok {
		n, err := strconv.Atoi(d)
		if err != nil {
			return 0, false
		}
		days, v = n, rest
	}
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, false
	}
	secs := 0
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return 0, false
		}
		secs = secs*60 + n
	}
	return time.Duration(days*86400+secs) * time.Second, true
}

// Alive returns nil while the allocation runs, else an error wrapping
// ErrAllocationEnded that says what became of it (a job past its time limit
// or completing is waited for until Slurm gives its final state, such as
// TIMEOUT, for up to 30 s).
func (s *Slurm) Alive(ctx context.Context) error {
	j, err := s.query(ctx, s.rec.JobID)
	for wait := time.Duration(0); err == nil && (j.state == stateOverTime || j.state == "COMPLETING") && wait < 30*time.Second; wait += 500 * time.Millisecond {
		if err := clock.Sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
		j, err = s.query(ctx, s.rec.JobID)
	}
	if err != nil || j.state == "RUNNING" {
		return err
	}
	next := "`mbench resume` asks for a new one"
	if s.cfg.Inside != "" {
		next = "mbench ran inside it; `mbench resume` in a new allocation continues"
	}
	return fmt.Errorf("%w: job %s (%s) on %s is %s; %s",
		ErrAllocationEnded, s.rec.JobID, s.rec.JobName, strings.Join(s.Nodes(), ","), cmp.Or(j.state, "gone"), next)
}

// Complete implements NodeHost: it stops the steps mbench left, then ends
// the job's batch script with SIGTERM (scancel --batch), which exits 0, so
// that Slurm records the job COMPLETED; a job that does not end within
// 30 s is cancelled. The record is removed. Inside an allocation only the
// steps are stopped.
func (s *Slurm) Complete(ctx context.Context) error {
	if s.rec.JobID == "" || s.ended {
		return nil
	}
	if err := s.cancelSteps(ctx); err != nil {
		return err
	}
	if s.cfg.Inside != "" {
		return nil
	}
	signal := "scancel --batch --signal=TERM " + shquote.Quote(s.rec.JobID)
	deadline := time.Now().Add(30 * time.Second)
	var sent time.Time
	for time.Now().Before(deadline) {
		if time.Since(sent) >= 5*time.Second { // once more, should the first find the script between two sleeps
			if _, _, err := s.Host.Run(ctx, signal); err != nil {
				break
			}
			sent = time.Now()
		}
		j, err := s.query(ctx, s.rec.JobID)
		if err != nil {
			return err
		}
		if j.state != "RUNNING" && j.state != "COMPLETING" && j.state != stateOverTime {
			s.ended = true
			return s.forget()
		}
		if err := clock.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return s.release(ctx)
}

// Close cancels the allocation (every step goes with it) unless Complete
// ended it, waits until Slurm no longer runs it, forgets the record and
// closes the login host. Inside an allocation it only cancels the steps
// mbench started.
func (s *Slurm) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	if s.cfg.Inside != "" {
		err = s.cancelSteps(ctx)
	} else if !s.ended {
		err = s.release(ctx)
	}
	return errors.Join(err, s.Host.Close())
}

// release cancels the job and waits until Slurm no longer runs it, then
// forgets the record.
func (s *Slurm) release(ctx context.Context) error {
	if s.rec.JobID == "" || s.cfg.Inside != "" || s.ended {
		return nil
	}
	if _, _, err := s.Host.Run(ctx, "scancel "+shquote.Quote(s.rec.JobID)); err != nil {
		return fmt.Errorf("host %s: scancel %s: %w", s.cfg.Name, s.rec.JobID, err)
	}
	wait := 20 * time.Millisecond
	for {
		j, err := s.query(ctx, s.rec.JobID)
		if err != nil {
			return err
		}
		if j.state != "RUNNING" && !pending(j.state) && j.state != "COMPLETING" && j.state != "SUSPENDED" && j.state != stateOverTime {
			break
		}
		if err := clock.Sleep(ctx, wait); err != nil {
			return fmt.Errorf("host %s: slurm job %s still %s after scancel: %w", s.cfg.Name, s.rec.JobID, j.state, err)
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
	s.ended = true
	return s.forget()
}

// forget removes the record of an allocation that has ended.
func (s *Slurm) forget() error {
	if err := os.Remove(s.cfg.JobFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
