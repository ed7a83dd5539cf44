package hosts

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// slowOps is a procOps whose scans take scanCost (a loaded machine, a slow
// link) and whose group dies dieAfterTerm after SIGTERM, or dieAfterKill
// after SIGKILL (a negative duration: never).
type slowOps struct {
	scanCost                   time.Duration
	dieAfterTerm, dieAfterKill time.Duration
	deaf                       bool // a scan ignores ctx (a remote command slow to end)

	mu           sync.Mutex
	term, kill   time.Time
	scans        int
	sigsReceived []syscall.Signal
}

func (o *slowOps) scan(ctx context.Context, q scanQuery) (snapshot, error) {
	sig, pgids := q.sig, q.pgids
	o.mu.Lock()
	o.scans++
	now := time.Now()
	switch sig {
	case syscall.SIGTERM:
		o.term = now
		o.sigsReceived = append(o.sigsReceived, sig)
	case syscall.SIGKILL:
		o.kill = now
		o.sigsReceived = append(o.sigsReceived, sig)
	}
	dead := (!o.term.IsZero() && o.dieAfterTerm >= 0 && now.Sub(o.term) >= o.dieAfterTerm) ||
		(!o.kill.IsZero() && o.dieAfterKill >= 0 && now.Sub(o.kill) >= o.dieAfterKill)
	o.mu.Unlock()
	done := ctx.Done()
	if o.deaf {
		done = nil
	}
	select {
	case <-time.After(o.scanCost):
	case <-done:
		return nil, ctx.Err()
	}
	if dead {
		return snapshot{}, nil
	}
	return snapshot{pgids[0]: {pid: pgids[0], pgrp: pgids[0], state: "S", start: "1"}}, nil
}

func (o *slowOps) marked(context.Context, []int, string) (map[int]bool, error) { return nil, nil }
func (o *slowOps) pidfiles(context.Context, string) ([]pidRecord, error)       { return nil, nil }
func (o *slowOps) remove(context.Context, []pidRecord) error                   { return nil }

// TestKillGroupsDeadline: the grace and the SIGKILL wait are deadlines,
// whatever a scan costs: with 40 ms scans (a shell scan under load) the
// stop ends within its deadline plus one scan, the grace is cut to leave
// the SIGKILL its reserve, and a group that dies is seen within a poll.
// The stop runs on synctest's virtual clock, so the bounds below are the
// logic's, never the machine's: the same figures on an idle or a loaded
// machine.
func TestKillGroupsDeadline(t *testing.T) {
	t.Parallel()
	const scan = 40 * time.Millisecond
	cases := []struct {
		name             string
		deadline, grace  time.Duration
		dieTerm, dieKill time.Duration
		wantSurvivors    bool
		wantKill         bool
		maxTook          time.Duration
		killAt           time.Duration // when SIGKILL is due after SIGTERM: the grace, or the deadline less the reserve
	}{
		{"obeys TERM", 5 * time.Second, 2 * time.Second, 30 * time.Millisecond, 0, false, false, 300 * time.Millisecond, 0},
		{"ignores TERM, grace fits", 5 * time.Second, 600 * time.Millisecond, -1, 20 * time.Millisecond, false, true, 600*time.Millisecond + 4*scan, 600 * time.Millisecond},
		{"ignores TERM, grace cut", 2 * time.Second, 30 * time.Second, -1, 20 * time.Millisecond, false, true, time.Second + 4*scan, time.Second},
		{"survives KILL", 1 * time.Second, 30 * time.Second, -1, -1, true, true, time.Second + scan, 500 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				o := &slowOps{scanCost: scan, dieAfterTerm: c.dieTerm, dieAfterKill: c.dieKill}
				ctx, cancel := context.WithTimeout(context.Background(), c.deadline)
				defer cancel()
				t0 := time.Now()
				surv, err := killTargets(ctx, o, []stopTarget{{pgid: 4242}}, c.grace)
				took := time.Since(t0)
				if err != nil {
					t.Fatal(err)
				}
				if (len(surv) > 0) != c.wantSurvivors {
					t.Errorf("survivors %v, want survivors=%v", surv, c.wantSurvivors)
				}
				if took > c.maxTook {
					t.Errorf("took %v, want at most %v (deadline %v, grace %v, %v a scan)", took, c.maxTook, c.deadline, c.grace, scan)
				}
				o.mu.Lock()
				defer o.mu.Unlock()
				if killed := !o.kill.IsZero(); killed != c.wantKill {
					t.Errorf("SIGKILL sent: %v, want %v (signals %v)", killed, c.wantKill, o.sigsReceived)
				}
				// SIGKILL goes out with the first scan after it is due:
				// never before, and no later than the poll that follows.
				if d := o.kill.Sub(o.term); c.wantKill && (d < c.killAt || d > c.killAt+2*scan) {
					t.Errorf("SIGKILL %v after SIGTERM, want %v to %v", d, c.killAt, c.killAt+2*scan)
				}
			})
		})
	}
}

// TestBoundedScansHoldTheDeadline: scans that take 3 s and ignore their
// context (a remote command slow to wind down) cannot stretch a stop: the
// bounded ops return at the deadline, SIGKILL still goes out, and the
// groups are reported as survivors. On synctest's virtual clock: the stop
// ends exactly when the SIGKILL scan's own second past the deadline does.
func TestBoundedScansHoldTheDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		o := &slowOps{scanCost: 3 * time.Second, dieAfterTerm: -1, dieAfterKill: -1, deaf: true}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		surv, err := killTargets(ctx, bounded{o}, []stopTarget{{pgid: 4242}}, time.Minute)
		took := time.Since(t0)
		if err != nil || len(surv) != 1 {
			t.Fatalf("killGroups = %v, %v; want the group reported as a survivor", surv, err)
		}
		// The deadline, plus the second the SIGKILL scan may take past it.
		if want := 1500 * time.Millisecond; took != want {
			t.Errorf("took %v with a 500 ms deadline, want %v", took, want)
		}
		o.mu.Lock()
		killed, sigs := !o.kill.IsZero(), o.sigsReceived
		o.mu.Unlock()
		if !killed {
			t.Errorf("no SIGKILL sent (signals %v)", sigs)
		}
		time.Sleep(o.scanCost) // the deaf scans the stop gave up on end too (virtual time)
	})
}
