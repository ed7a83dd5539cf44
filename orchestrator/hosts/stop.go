package hosts

import (
	"context"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mbench/mbench/internal/clock"
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
		if slices.ContainsFunc(snap.members(r.pid), func(p int) bool { return m[p] }) || len(snap.tree(0, recordTag(r, marker))) > 0 {
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
	killAt, end := stopSchedule(ctx, grace)
	trees := &stopTrees{targets: targets, known: map[int]map[int]string{}}
	q := scanQuery{since: since(targets)}
	last := map[int][]int{} // survivors as last seen; before any scan, every target
	for _, t := range targets {
		trees.pgids = append(trees.pgids, t.pgid)
		if t.tag != "" {
			q.tags = append(q.tags, t.tag)
		}
		last[t.pgid] = nil
	}
	q.pgids = trees.pgids
	// A first scan, before any signal, sees each tree whole.
	snap, err := ops.scan(ctx, q)
	if err != nil {
		if time.Now().Before(end) {
			return nil, err
		}
		snap = snapshot{} // the deadline cut it: the signals still go out
	}
	l := trees.left(snap)
	if err == nil && len(l) == 0 {
		return nil, nil
	}
	found := trees.outside(snap, l, nil) // as the last scan saw them
	ph := killPhase{sig: syscall.SIGTERM, end: killAt, wait: firstTick, begin: true, sent: map[int]bool{}}
	for {
		ph.signals(&q, trees.pgids, found)
		snap, err := scanBefore(ctx, ops, q, end)
		if err != nil {
			switch {
			case time.Now().Before(end):
				return nil, err // a failure, not the deadline
			case !ph.kill: // the deadline cut a scan: send SIGKILL anyway
				ph.escalate(end)
				continue
			}
			return last, nil // what the last scan saw
		}
		ph.signalled(q)
		l := trees.left(snap)
		last = l
		if len(l) == 0 {
			return nil, nil
		}
		// The groups' members got the phase's signal with their group.
		found = trees.outside(snap, l, found[:0])
		if !time.Now().Before(ph.end) || ctx.Err() != nil {
			if ph.kill {
				return l, nil
			}
			ph.escalate(end)
			continue
		}
		_ = clock.Sleep(ctx, min(ph.wait, time.Until(ph.end)))
		ph.wait = min(2*ph.wait, maxTick)
	}
}

// stopSchedule returns when a stop with this grace sends SIGKILL and when
// it gives up: ctx's deadline, or defaultKillWait after the grace without
// one. The grace is cut so that killReserve (at most half the time left)
// remains for the SIGKILL.
func stopSchedule(ctx context.Context, grace time.Duration) (killAt, end time.Time) {
	now := time.Now()
	end, ok := ctx.Deadline()
	if !ok {
		end = now.Add(max(grace, 0) + defaultKillWait)
	}
	reserve := min(killReserve, end.Sub(now)/2)
	killAt = now.Add(max(grace, 0))
	if last := end.Add(-reserve); killAt.After(last) {
		killAt = last
	}
	return killAt, end
}

// scanBefore scans with end as its deadline, except a scan that sends
// SIGKILL: that must go out even when the deadline has passed.
func scanBefore(ctx context.Context, ops procOps, q scanQuery, end time.Time) (snapshot, error) {
	if soon := time.Now().Add(time.Second); q.sig == syscall.SIGKILL && soon.After(end) {
		end = soon
	}
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
	defer cancel()
	return ops.scan(sctx, q)
}

// killPhase is the state of one signal's phase of a stop.
type killPhase struct {
	sig   syscall.Signal
	end   time.Time
	wait  time.Duration // before the next scan
	kill  bool          // the SIGKILL phase
	begin bool          // the next scan opens the phase: it signals the groups and all found
	sent  map[int]bool  // processes sent this phase's signal
}

// escalate opens the SIGKILL phase, which lasts until end.
func (ph *killPhase) escalate(end time.Time) {
	ph.sig, ph.end, ph.wait, ph.kill, ph.begin = syscall.SIGKILL, end, firstTick, true, true
	clear(ph.sent)
}

// signals sets what q's scan sends: as the phase opens, its signal to the
// groups and to every process found outside them; later, to the found
// processes not yet sent it.
func (ph *killPhase) signals(q *scanQuery, pgids, found []int) {
	q.sig, q.killGroups, q.killPids = 0, nil, nil
	for _, p := range found {
		if ph.begin || !ph.sent[p] {
			q.killPids = append(q.killPids, p)
		}
	}
	if ph.begin {
		q.killGroups = pgids
	}
	if ph.begin || len(q.killPids) > 0 {
		q.sig = ph.sig
	}
}

// signalled records that q's scan sent its signals.
func (ph *killPhase) signalled(q scanQuery) {
	for _, p := range q.killPids {
		ph.sent[p] = true
	}
	ph.begin = false
}

// stopTrees follows the targets' trees from scan to scan. A process once
// seen in a tree stays in it while it lives (same pid and start time): a
// child of the leader is re-parented when the leader dies of the SIGTERM,
// and the parent pid no longer says whose it is.
type stopTrees struct {
	targets []stopTarget
	pgids   []int
	known   map[int]map[int]string // by target pgid: pid → start time
}

// left returns, by target pgid, the live processes of each tree in s
// (sorted); a tree with none is absent.
func (tr *stopTrees) left(s snapshot) map[int][]int {
	out := map[int][]int{}
	for _, t := range tr.targets {
		k := tr.known[t.pgid]
		if k == nil {
			k = map[int]string{}
			tr.known[t.pgid] = k
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

// outside appends to found the processes of l outside the targets' groups.
func (tr *stopTrees) outside(s snapshot, l map[int][]int, found []int) []int {
	for _, m := range l {
		for _, pid := range m {
			if !slices.Contains(tr.pgids, s[pid].pgrp) {
				found = append(found, pid)
			}
		}
	}
	return found
}
