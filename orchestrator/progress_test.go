package orchestrator

import (
	"bytes"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestProgressCountsARunOnce: an attempt run again in place is shown but
// not counted, so the counter never passes the plan's total; a message
// logged between runs is its own line (no empty "[0/2] : " line before the
// first run, no run line repeated after it).
func TestProgressCountsARunOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b bytes.Buffer
		p := newProgress(&b, 2, false)
		p.log("probe: NVML unavailable")
		p.begin("b1 a rate=1")
		p.again("NOT A RESULT (client_limited): late; running it again")
		p.begin("b1 a rate=1")
		time.Sleep(5 * time.Second)
		p.finish("ok")
		p.log("a note between runs")
		p.begin("b1 b rate=1")
		p.log("a note within a run")
		p.finish("ok")
		p.log("sweep stopped: reached repeat.max")
		want := []string{
			"probe: NVML unavailable",
			"[0/2] b1 a rate=1: launch",
			"[0/2] b1 a rate=1: NOT A RESULT (client_limited): late; running it again",
			"[0/2] b1 a rate=1: launch",
			"[1/2] b1 a rate=1: ok · 1 to go, about 5s left",
			"a note between runs",
			"[1/2] b1 b rate=1: launch",
			"a note within a run",
			"[2/2] b1 b rate=1: ok",
			"sweep stopped: reached repeat.max",
		}
		if got := strings.TrimSpace(b.String()); got != strings.Join(want, "\n") {
			t.Errorf("progress printed\n%s\nwant\n%s", got, strings.Join(want, "\n"))
		}
	})
}

// TestProgressETA: the time left is the runs left times the mean measured
// run time (a block the stopping rule adds raises it), bounded by the time
// budget, and said to be the budget's when that ends first.
func TestProgressETA(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b bytes.Buffer
		p := newProgress(&b, 10, false)
		p.setBudget(time.Now().Add(5 * time.Minute))
		run := func(name string, d time.Duration) string {
			b.Reset()
			p.begin(name)
			time.Sleep(d)
			p.finish("ok")
			lines := strings.Split(strings.TrimSpace(b.String()), "\n")
			return lines[len(lines)-1]
		}
		steps := []struct {
			d    time.Duration
			grow int
			want string
		}{
			{10 * time.Second, 0, "[1/10] r: ok · 9 to go, about 1m30s left"},
			{30 * time.Second, 0, "[2/10] r: ok · 8 to go, about 2m40s left"}, // mean 20 s
			{20 * time.Second, 14, "[3/14] r: ok · 11 to go, about 3m40s left"},
			{60 * time.Second, 0, "[4/14] r: ok · 10 to go, about 3m0s left (the time budget ends first)"}, // mean 30 s, 180 s of budget left
			{190 * time.Second, 0, "[5/14] r: ok · 9 planned to go; the time budget is spent: the block under way is the last"},
		}
		for _, st := range steps {
			if st.grow > 0 {
				p.grow(st.grow)
			}
			if got := run("r", st.d); got != st.want {
				t.Errorf("after a run of %s: %q, want %q", st.d, got, st.want)
			}
		}
		q := newProgress(&b, 3, false) // no budget, no run measured yet
		b.Reset()
		q.finish("skipped")
		if got := strings.TrimSpace(b.String()); got != "[1/3] : skipped" {
			t.Errorf("before any run is timed: %q, want no estimate", got)
		}
	})
}
