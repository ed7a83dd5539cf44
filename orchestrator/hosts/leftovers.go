package hosts

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// Leftover is a process recorded in a pidfile that is still ours: its group
// is alive and carries the sweep's marker (and, while the leader lives, the
// leader's start time matches the pidfile, so a reused pid is never taken),
// or processes it started that left the group carry its tag.
type Leftover struct {
	Name      string // pidfile base name without ".pid"
	PidFile   string // path on the host
	Pid       int    // pid = process group id
	StartTime string // /proc/<pid>/stat field 22 recorded at start
	Members   []int  // live processes of the group, its tagged processes and their descendants, when scanned
}

// StopLeftovers stops every leftover under stateDir (SIGTERM to the group,
// SIGKILL after grace, verified) and removes its pidfile; it also removes
// pidfiles whose process group is entirely gone. Pidfiles naming a live
// process that is not ours are left alone. It returns what it stopped.
func StopLeftovers(ctx context.Context, h Host, stateDir, marker string, grace time.Duration) ([]Leftover, error) {
	if err := checkStateDir(stateDir); err != nil {
		return nil, err
	}
	return leftoverScan(ctx, h, stateDir, marker, true, grace)
}

func checkStateDir(d string) error {
	if d == "" {
		return errors.New("leftovers: empty state directory")
	}
	return checkPath(d)
}

// leftoverScan finds the leftovers of a state dir, or of one pidfile when
// target ends in ".pid", and with stop set stops them (see StopLeftovers).
func leftoverScan(ctx context.Context, h Host, target, marker string, stop bool, grace time.Duration) ([]Leftover, error) {
	wrap := func(err error) error { return fmt.Errorf("leftovers in %s on %s: %w", target, h.Name(), err) }
	if err := checkMarker(marker); err != nil {
		return nil, wrap(err)
	}
	ops := opsFor(h)
	recs, err := ops.pidfiles(ctx, target)
	if err != nil {
		return nil, wrap(err)
	}
	snap, ours, err := ownedGroups(ctx, ops, recs, marker)
	if err != nil {
		return nil, wrap(err)
	}
	var res []Leftover
	var targets []stopTarget
	var gone []pidRecord // pidfiles to remove
	for _, r := range recs {
		if !ours[r.pid] {
			// Not ours: remove the pidfile only when nothing of it is alive.
			if stop && r.pid > 1 && !snap.alive(r.pid) && len(snap.members(r.pid)) == 0 {
				gone = append(gone, r)
			}
			continue
		}
		tag := recordTag(r, marker)
		res = append(res, Leftover{Name: strings.TrimSuffix(path.Base(r.path), ".pid"), PidFile: r.path,
			Pid: r.pid, StartTime: r.start, Members: snap.tree(r.pid, tag)})
		targets = append(targets, stopTarget{pgid: r.pid, start: r.start, tag: tag})
	}
	if !stop {
		return res, nil
	}
	surv, err := killTargets(ctx, ops, targets, grace)
	if err != nil {
		return nil, wrap(err)
	}
	var stopped []Leftover
	var msgs []string
	for _, l := range res {
		if m, ok := surv[l.Pid]; ok {
			msgs = append(msgs, fmt.Sprintf("%s (pgid %d: %v)", l.Name, l.Pid, m))
			continue
		}
		stopped = append(stopped, l)
		gone = append(gone, pidRecord{path: l.PidFile, pid: l.Pid, start: l.StartTime})
	}
	// Within the deadline only: a pidfile left behind names a group that is
	// gone, and the next scan removes it.
	if err := ops.remove(ctx, gone); err != nil && ctx.Err() == nil {
		return stopped, wrap(err)
	}
	if len(msgs) > 0 {
		return stopped, wrap(fmt.Errorf("still alive after SIGKILL: %s", strings.Join(msgs, "; ")))
	}
	return stopped, nil
}
