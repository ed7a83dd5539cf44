package hosts

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
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

// stopTarget is one started process to stop: its process group, the
// leader's start time (nothing started before it is its descendant) and the
// tag its processes carry (procTag), by which the ones that left the group
// are found.
type stopTarget struct {
	pgid  int
	start string
	tag   string
}

// since is the earliest start time of targets, for scanQuery.since (0 when
// none is known).
func since(targets []stopTarget) uint64 {
	var min uint64
	for _, t := range targets {
		if v, err := strconv.ParseUint(t.start, 10, 64); err == nil && (min == 0 || v < min) {
			min = v
		}
	}
	return min
}

// recordTag is the tag of the process a pidfile records, started with marker.
func recordTag(r pidRecord, marker string) string {
	return procTag(marker, strings.TrimSuffix(path.Base(r.path), ".pid"))
}

// ownedGroups returns, of recs, the process groups that are ours: the leader
// is alive, leads its group, has the recorded start time and the marker; or
// the leader is gone and a live member of the group carries the marker, or
// a live process started since carries the record's tag (a child that left
// the group). A pid reused by another process is therefore never taken.
// snap is the scan it decided on.
func ownedGroups(ctx context.Context, ops procOps, recs []pidRecord, marker string) (snapshot, map[int]bool, error) {
	var pgids []int
	var tags []string
	var targets []stopTarget
	for _, r := range recs {
		if r.pid > 1 {
			pgids = append(pgids, r.pid)
			tags = append(tags, recordTag(r, marker))
			targets = append(targets, stopTarget{pgid: r.pid, start: r.start})
		}
	}
	snap, err := ops.scan(ctx, scanQuery{pgids: pgids, since: since(targets), tags: tags})
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
		if len(snap.tree(0, recordTag(r, marker))) > 0 {
			ours[r.pid] = true
		}
	}
	return snap, ours, nil
}

// killTargets sends SIGTERM to each target's tree (snapshot.tree: its group,
// the processes that carry its tag, their descendants), waits until every
// tree is empty or the grace is over, sends SIGKILL and waits until they are
// empty or ctx's deadline (defaultKillWait without one) has passed. A
// process found in a tree during a phase gets that phase's signal at the
// next scan. The grace is cut so that killReserve (at most half the time
// left) remains for the SIGKILL. Each tick scans the process table once. It
// returns, by target pgid, the live processes of each tree that survived;
// none means every tree is gone.
func killTargets(ctx context.Context, ops procOps, targets []stopTarget, grace time.Duration) (map[int][]int, error) {
	if len(targets) == 0 {
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
	var pgids []int
	q := scanQuery{since: since(targets)}
	for _, t := range targets {
		pgids = append(pgids, t.pgid)
		if t.tag != "" {
			q.tags = append(q.tags, t.tag)
		}
	}
	q.pgids = pgids
	// A process once seen in a tree stays in it while it lives (same pid and
	// start time): a child of the leader is re-parented when the leader
	// dies of the SIGTERM, and the parent pid no longer says whose it is.
	known := map[int]map[int]string{}
	left := func(s snapshot) map[int][]int {
		out := map[int][]int{}
		for _, t := range targets {
			k := known[t.pgid]
			if k == nil {
				k = map[int]string{}
				known[t.pgid] = k
			}
			for _, pid := range s.tree(t.pgid, t.tag) {
				if _, ok := k[pid]; !ok {
					k[pid] = s[pid].start
				}
			}
			var m []int
			for pid, start := range k {
				if p, ok := s[pid]; ok && p.live() && p.start == start {
					m = append(m, pid)
				} else {
					delete(k, pid)
				}
			}
			if len(m) > 0 {
				slices.Sort(m)
				out[t.pgid] = m
			}
		}
		return out
	}
	last := map[int][]int{} // survivors as last seen; before any scan, every target
	for _, t := range targets {
		last[t.pgid] = nil
	}
	// A first scan, before any signal, sees each tree whole.
	snap, err := ops.scan(ctx, q)
	switch {
	case err != nil && time.Now().Before(end):
		return nil, err
	case err != nil: // the deadline cut it: the signals still go out
		snap = snapshot{}
	case len(left(snap)) == 0:
		return nil, nil
	}
	phaseSig, phaseEnd, wait, killed := syscall.SIGTERM, killAt, firstTick, false
	begin := true          // the next scan opens a phase: it signals the groups and all found
	sent := map[int]bool{} // processes sent this phase's signal
	var found []int        // processes of the trees outside the groups, as the last scan saw them
	for _, m := range left(snap) {
		for _, pid := range m {
			if !slices.Contains(pgids, snap[pid].pgrp) {
				found = append(found, pid)
			}
		}
	}
	for {
		q.sig, q.killGroups, q.killPids = 0, nil, nil
		for _, p := range found {
			if begin || !sent[p] {
				q.killPids = append(q.killPids, p)
			}
		}
		if begin {
			q.killGroups = pgids
		}
		if begin || len(q.killPids) > 0 {
			q.sig = phaseSig
		}
		// Scans end with the deadline, except one that sends SIGKILL: that
		// must go out even when the deadline has passed.
		sdl := end
		if q.sig == syscall.SIGKILL {
			sdl = later(end, time.Now().Add(time.Second))
		}
		sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), sdl)
		snap, err := ops.scan(sctx, q)
		cancel()
		if err != nil {
			switch {
			case time.Now().Before(end):
				return nil, err // a failure, not the deadline
			case !killed: // the deadline cut a scan: send SIGKILL anyway
				phaseSig, phaseEnd, killed, begin = syscall.SIGKILL, end, true, true
				clear(sent)
				continue
			}
			return last, nil // what the last scan saw
		}
		for _, p := range q.killPids {
			sent[p] = true
		}
		begin = false
		l := left(snap)
		last = l
		if len(l) == 0 {
			return nil, nil
		}
		found = found[:0] // the groups' members got the phase's signal with their group
		for _, m := range l {
			for _, pid := range m {
				if !slices.Contains(pgids, snap[pid].pgrp) {
					found = append(found, pid)
				}
			}
		}
		if !time.Now().Before(phaseEnd) || ctx.Err() != nil {
			if killed {
				return l, nil
			}
			phaseSig, phaseEnd, wait, killed, begin = syscall.SIGKILL, end, firstTick, true, true
			clear(sent)
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
