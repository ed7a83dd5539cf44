package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/results"
)

// A host that stops answering is no failure of a run: the run it cut short
// is journaled host_lost (results.VerdictHostLost), as is every later run
// of the block that needs the host, without trying it; the runs of the
// block that need no lost host go on, so the block's runs stay paired in
// time. The sweep then stops with the cause: no later block could be
// complete. Resume runs every host_lost run again (journalIndex ignores
// those lines), as it does the run a lost Slurm allocation cut short.

// lostHost names the SSH host whose loss failed the run, with the cause,
// which wraps hosts.ErrHostUnreachable: the run's error when it says so (a
// reconnection's every attempt failed), else the error of a command on an
// SSH host the sweep is connected to that now reaches nothing (a
// reconnection's attempts, each bounded by the host's connect_timeout). A
// connection that broke and is made again is the run's failure, not a lost
// host: "", nil. The name is "" too when the cause names no host of the
// matrix.
func (f *fleet) lostHost(ctx context.Context, runErr error) (string, error) {
	if ue, ok := errors.AsType[*hosts.UnreachableError](runErr); ok {
		return ue.Host, runErr
	}
	for _, name := range f.m.HostOrder {
		hc := f.m.Hosts[name]
		if isLocal(hc.Address) || hc.IsSlurm() {
			continue
		}
		if h, ok := f.connected(name); ok {
			if _, _, err := h.Run(context.WithoutCancel(ctx), "true"); errors.Is(err, hosts.ErrHostUnreachable) {
				return name, err
			}
		}
	}
	if errors.Is(runErr, hosts.ErrHostUnreachable) {
		return "", runErr
	}
	return "", nil
}

// lose records that the host name stopped answering (why): the sweep runs
// nothing more there.
func (f *fleet) lose(name string, why error) {
	if f.lost == nil {
		f.lost = map[string]error{}
	}
	if _, ok := f.lost[name]; !ok {
		f.lost[name] = why
	}
}

// isLost reports whether the host name stopped answering.
func (f *fleet) isLost(name string) bool {
	_, ok := f.lost[name]
	return ok
}

// lostFor is the first lost host that config's runs need ("" for none).
func (f *fleet) lostFor(config string) string {
	if len(f.lost) == 0 {
		return ""
	}
	for _, h := range f.configHosts(config) {
		if f.isLost(h) {
			return h
		}
	}
	return ""
}

// configHosts are the hosts a config's engines and router run on.
func (f *fleet) configHosts(config string) []string {
	l, err := f.m.Launch(config, f.runtime())
	if err != nil {
		return nil
	}
	var out []string
	for _, in := range l.Instances {
		if !slices.Contains(out, in.Host) {
			out = append(out, in.Host)
		}
	}
	if l.Router != nil && !slices.Contains(out, l.Router.Host) {
		out = append(out, l.Router.Host)
	}
	return out
}

// lostHostsError is the error that stops a sweep after the block in which
// hosts stopped answering: it names them and the runs journaled host_lost,
// and wraps the first one's cause.
func (f *fleet) lostHostsError(block, runs int) error {
	names := slices.DeleteFunc(slices.Clone(f.m.HostOrder), func(name string) bool { return !f.isLost(name) })
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("%s %s stopped answering in block %d: %d %s journaled host_lost (no failure of a cell); the sweep stopped after the block, since no later block could be complete, and resume runs them again once the host answers: %w",
		plural(len(names), "host"), strings.Join(names, ", "), block, runs, plural(runs, "run"), f.lost[names[0]])
}

// journalLost journals the run of cell in block b as host_lost: the host
// stopped answering while it ran (dir holds what it wrote), or before it
// started (dir "": it was not tried).
func (s *sweep) journalLost(cell matrices.Cell, b int, dir, why string, started time.Time) error {
	now := time.Now().UTC()
	if started.IsZero() {
		started = now
	}
	e := JournalEntry{RunRef: results.RunRef{Cell: cell.ID, Block: b, Status: results.VerdictHostLost, Dir: dir, Reason: s.redact(why)},
		Started: started, Finished: now, Nodes: s.fleet.slurmNodes()}
	if _, err := s.store.ledger.record(e); err != nil {
		return err
	}
	s.lostRuns++
	return nil
}

// skipLost journals the run of cell in block b host_lost without trying it
// when its config needs a host that stopped answering; ok is false when it
// needs none.
func (s *sweep) skipLost(cell matrices.Cell, b int) (ok bool, err error) {
	host := s.fleet.lostFor(cell.Config)
	if host == "" {
		return false, nil
	}
	if err := s.journalLost(cell, b, "", "not run: host "+host+" stopped answering earlier in the sweep", time.Time{}); err != nil {
		return true, err
	}
	s.logf("cell %s (%s rate=%g) b%d: not run: it needs host %s, which stopped answering; journaled host_lost (resume runs it)",
		cell.ID, cell.Config, cell.Rate, b, host)
	s.prog.skip()
	return true, nil
}
