package orchestrator

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"

	"github.com/mbench/mbench/internal/cpupin"
	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/probes"
)

// What shares a run's CPUs is read around its load: /proc on this machine
// (the load generator's) and on every host with an engine process (this
// one or an SSH host; a Slurm step's processes are not the host's to
// read), mbench's own scheduling delay in between. With Options.ClientCPUs
// the load generator runs on those CPUs and the local engines' processes
// are kept off them.

// pinning is the sweep's CPU split on this machine: the load generator
// runs on client during each run's load (and on all of mbench's CPUs
// between, so that an engine it launches does not inherit client), and
// local engines' processes are kept off client; nil without
// Options.ClientCPUs.
type pinning struct {
	client, all []int
	procs       int // GOMAXPROCS outside the load
}

// newPinning checks that cpus are this process's to use and leave some
// for the engine, in the user's terms.
func newPinning(cpus []int) (*pinning, error) {
	if len(cpus) == 0 {
		return nil, nil
	}
	allowed, err := cpupin.Allowed(0)
	if err != nil {
		return nil, fmt.Errorf("--client-cpus: %w", err)
	}
	if out := cpupin.Without(cpus, allowed); len(out) > 0 {
		return nil, fmt.Errorf("--client-cpus %s: CPU %s is not one mbench may run on (%s)", cpupin.Format(cpus), cpupin.Format(out), cpupin.Format(allowed))
	}
	if len(cpupin.Without(allowed, cpus)) == 0 {
		return nil, fmt.Errorf("--client-cpus %s: that is every CPU mbench may run on (%s), none would be left for a local engine", cpupin.Format(cpus), cpupin.Format(allowed))
	}
	return &pinning{client: cpus, all: allowed}, nil
}

// enter puts mbench on the load generator's CPUs.
func (p *pinning) enter() error {
	if err := cpupin.Self(p.client); err != nil {
		return fmt.Errorf("--client-cpus: %w", err)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		p.procs = runtime.GOMAXPROCS(max(2, len(p.client))) // the load generator's reactor needs two Ps
	}
	return nil
}

// leave gives mbench all its CPUs back.
func (p *pinning) leave() error {
	if p.procs > 0 {
		runtime.GOMAXPROCS(p.procs)
		p.procs = 0
	}
	if err := cpupin.Self(p.all); err != nil {
		return fmt.Errorf("--client-cpus: %w", err)
	}
	return nil
}

// keepOff moves every process of the trees led by pgids off the load
// generator's CPUs: each keeps the CPUs it had that are not the load
// generator's. A process with none left is an error: the engine was
// started on the load generator's CPUs only.
func (p *pinning) keepOff(s *probes.CPUSnapshot, pgids []int) error {
	for _, pid := range s.Tree(pgids) {
		cur, err := cpupin.Allowed(pid)
		if err != nil {
			continue // exited meanwhile
		}
		want := cpupin.Without(cur, p.client)
		if len(want) == len(cur) {
			continue
		}
		if len(want) == 0 {
			return fmt.Errorf("engine process %d runs on CPUs %s, all of them the load generator's (--client-cpus %s)", pid, cpupin.Format(cur), cpupin.Format(p.client))
		}
		if err := cpupin.Processes([]int{pid}, want); err != nil {
			return err
		}
	}
	return nil
}

// contentionWatch is one run's watch: the first readings and the
// scheduling-delay sampler.
type contentionWatch struct {
	local  *probes.CPUSnapshot
	cpus   []int // the load generator's
	hosts  []engineHostRead
	lag    *probes.SchedLag
	cancel context.CancelFunc
	wg     sync.WaitGroup
	pin    *pinning
	once   sync.Once
	log    *sweepLog
}

// engineHostRead is one host with engine processes: how to read it, the
// groups its engine processes lead, and its first reading.
type engineHostRead struct {
	name   string
	local  bool
	runner probes.Runner
	pgids  []int
	first  *probes.CPUSnapshot
}

// watchContention takes the first readings (keeping local engines off the
// load generator's CPUs when the sweep pins) and starts the sampler. A
// host that cannot be read is said once and left out; only pinning that
// fails is an error.
func (s *runner) watchContention(ctx context.Context, es *engineSet) (*contentionWatch, error) {
	w := &contentionWatch{lag: &probes.SchedLag{}, log: s.sweepLog}
	byHost := map[string]*engineHostRead{}
	var order []string
	for _, p := range es.all() {
		hc := s.m.Hosts[p.hostName]
		if hc.IsSlurm() {
			continue
		}
		h := byHost[p.hostName]
		if h == nil {
			h = &engineHostRead{name: p.hostName, local: s.instr.hosts.onThisMachine(p.hostName), runner: p.host}
			byHost[p.hostName], order = h, append(order, p.hostName)
		}
		if !slices.Contains(h.pgids, p.proc.Pid()) {
			h.pgids = append(h.pgids, p.proc.Pid())
		}
	}
	var err error
	if s.pin != nil {
		w.cpus = s.pin.client
	} else if w.cpus, err = cpupin.Allowed(0); err != nil {
		s.noteOnce("contention-cpus", "warning: the load generator's CPUs not known: %v", err)
	}
	if w.local, err = probes.ReadCPU(ctx, hosts.NewLocal()); err != nil {
		s.noteOnce("contention-local", "warning: CPU contention not recorded on this machine: %v", err)
	}
	for _, name := range order {
		h := byHost[name]
		if h.local {
			h.first = w.local
			if s.pin != nil && w.local != nil {
				if err := s.pin.keepOff(w.local, h.pgids); err != nil {
					return nil, err
				}
			}
		} else if h.first, err = probes.ReadCPU(ctx, h.runner); err != nil {
			s.noteOnce("contention-"+name, "warning: CPU contention not recorded on host %s: %v", name, err)
		}
		if h.first != nil {
			w.hosts = append(w.hosts, *h)
		}
	}
	lctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	w.wg.Go(func() { w.lag.Run(lctx) })
	if s.pin != nil {
		if err := s.pin.enter(); err != nil {
			w.stop()
			return nil, err
		}
		w.pin = s.pin
	}
	return w, nil
}

// stop ends the sampler and gives mbench its CPUs back; it may be called
// more than once.
func (w *contentionWatch) stop() {
	w.once.Do(func() {
		w.cancel()
		w.wg.Wait()
		if w.pin != nil {
			if err := w.pin.leave(); err != nil {
				w.log.logf("warning: %v", err)
			}
		}
	})
}

// finish stops the watch, takes the second readings and summarizes.
func (w *contentionWatch) finish(ctx context.Context, s *runner) *probes.Contention {
	w.stop()
	c := &probes.Contention{SchedDelay: w.lag.Summary()}
	var local *probes.CPUSnapshot
	if w.local != nil {
		var err error
		if local, err = probes.ReadCPU(ctx, hosts.NewLocal()); err != nil {
			s.noteOnce("contention-local", "warning: CPU contention not recorded on this machine: %v", err)
		} else if l, ok := probes.SummarizeLoadGenCores(w.local, local, w.cpus, os.Getpid()); ok {
			c.LoadGenCores = &l
		}
	}
	for _, h := range w.hosts {
		last := local
		if !h.local {
			var err error
			if last, err = probes.ReadCPU(ctx, h.runner); err != nil {
				s.noteOnce("contention-"+h.name, "warning: CPU contention not recorded on host %s: %v", h.name, err)
				continue
			}
		}
		if last == nil {
			continue
		}
		if e, ok := probes.SummarizeEngineHost(h.name, h.first, last, h.pgids, h.local); ok {
			c.EngineHosts = append(c.EngineHosts, e)
		}
	}
	if c.SchedDelay == nil && c.LoadGenCores == nil && len(c.EngineHosts) == 0 {
		return nil
	}
	return c
}
