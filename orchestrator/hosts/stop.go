package hosts

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// Poll intervals of the stop loop: the first check comes after firstTick,
// each later one after twice the previous wait, up to maxTick. A process
// that dies at once is seen within milliseconds; a slow one costs at most
// one scan per maxTick.
const (
	firstTick = 5 * time.Millisecond
	maxTick   = 100 * time.Millisecond
)

// killReserve is the part of a stop's deadline kept for SIGKILL and its
// check: the SIGTERM grace is cut so that it fits. A GPU process can take a
// moment to exit even after SIGKILL (the driver frees its memory first).
const killReserve = 3 * time.Second

// defaultKillWait bounds the wait after SIGKILL when ctx has no deadline.
const defaultKillWait = 10 * time.Second

// ownedGroups returns, of recs, the process groups that are ours: the leader
// is alive, leads its group, has the recorded start time and the marker; or
// the leader is gone and a live member of the group carries the marker. A
// pid reused by another process is therefore never taken. snap is the scan
// it decided on.
func ownedGroups(ctx context.Context, ops procOps, recs []pidRecord, marker string) (snapshot, map[int]bool, error) {
	var pgids []int
	for _, r := range recs {
		if r.pid > 1 {
			pgids = append(pgids, r.pid)
		}
	}
	snap, err := ops.scan(ctx, 0, pgids)
	if err != nil {
		return nil, nil, err
	}
	var check []int
	for _, r := range recs {
		if r.pid <= 1 {
			continue
		}
		if l, ok := snap.leader(r.pid); ok {
			if l.start == r.start {
				check = append(check, r.pid)
			}
			continue
		}
		if _, ok := snap[r.pid]; ok && snap.alive(r.pid) {
			continue // the pid lives outside its group: not a group we started
		}
		check = append(check, snap.members(r.pid)...)
	}
	m, err := ops.marked(ctx, check, marker)
	if err != nil {
		return nil, nil, err
	}
	ours := map[int]bool{}
	for _, r := range recs {
		if r.pid <= 1 {
			continue
		}
		if l, ok := snap.leader(r.pid); ok {
			ours[r.pid] = l.start == r.start && m[r.pid]
			continue
		}
		if snap.alive(r.pid) {
			continue
		}
		for _, p := range snap.members(r.pid) {
			if m[p] {
				ours[r.pid] = true
			}
		}
	}
	return snap, ours, nil
}

// killGroups sends SIGTERM to each group, waits until the groups are empty
// or the grace is over, sends SIGKILL and waits until they are empty or ctx's
// deadline (defaultKillWait without one) has passed. The grace is cut so that
// killReserve (at most half the time left) remains for the SIGKILL. Each
// tick scans the process table once. It returns the live members of each
// group that survived; none means every group is gone.
func killGroups(ctx context.Context, ops procOps, pgids []int, grace time.Duration) (map[int][]int, error) {
	if len(pgids) == 0 {
		return nil, nil
	}
	now := time.Now()
	end, ok := ctx.Deadline()
	if !ok {
		end = now.Add(max(grace, 0) + defaultKillWait)
	}
	reserve := min(killReserve, end.Sub(now)/2)
	killAt := now.Add(max(grace, 0))
	if last := end.Add(-reserve); killAt.After(last) {
		killAt = last
	}
	left := func(s snapshot) map[int][]int {
		out := map[int][]int{}
		for _, g := range pgids {
			if m := s.members(g); len(m) > 0 {
				out[g] = m
			}
		}
		return out
	}
	last := map[int][]int{} // survivors as last seen; before any scan, every group
	for _, g := range pgids {
		last[g] = nil
	}
	sig, phaseEnd, wait, killed := syscall.SIGTERM, killAt, firstTick, false
	for {
		// Scans end with the deadline, except the one that sends SIGKILL:
		// that must go out even when the deadline has passed.
		sdl := end
		if sig == syscall.SIGKILL {
			sdl = later(end, time.Now().Add(time.Second))
		}
		sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), sdl)
		snap, err := ops.scan(sctx, sig, pgids)
		cancel()
		if err != nil {
			switch {
			case time.Now().Before(end):
				return nil, err // a failure, not the deadline
			case !killed: // the deadline cut a scan: send SIGKILL anyway
				sig, phaseEnd, killed = syscall.SIGKILL, end, true
				continue
			}
			return last, nil // what the last scan saw
		}
		sig = 0
		l := left(snap)
		last = l
		if len(l) == 0 {
			return nil, nil
		}
		if !time.Now().Before(phaseEnd) || ctx.Err() != nil {
			if killed {
				return l, nil
			}
			sig, phaseEnd, wait, killed = syscall.SIGKILL, end, firstTick, true
			continue
		}
		t := time.NewTimer(min(wait, time.Until(phaseEnd)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(2*wait, maxTick)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// survivorsError describes groups that outlived SIGKILL.
func survivorsError(s map[int][]int) error {
	return fmt.Errorf("processes still alive after SIGKILL: %v", s)
}
