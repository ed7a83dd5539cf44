package schedprobe

import (
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// TestHeldBackSeesAStarvedProcess: a watched process that wants a CPU
// and shares one with five busy loops waits for it most of the time; the
// probe must count that wait as a hold-back of about that size, and an
// unwatched process's wait must not count: a probe that does not watch
// it, over the same interval, must see that much less (this process's own
// threads wait alike for both), and the difference is at most the
// interval.
func TestHeldBackSeesAStarvedProcess(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("no taskset")
	}
	p, plain := Start(t), Start(t)
	if !p.Available() {
		t.Skip("no per-thread schedstat in this kernel (CONFIG_SCHED_INFO)")
	}
	spin := func() *exec.Cmd {
		c := exec.Command("taskset", "-c", "0", "sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	for range 5 {
		spin()
	}
	// The unwatched spinners wait as much as the watched one: what they
	// waited before Watch and what they wait after must not count.
	time.Sleep(100 * time.Millisecond)
	watched := spin()
	time.Sleep(50 * time.Millisecond)
	p.Watch(watched.Process.Pid)
	from := time.Now()
	time.Sleep(400 * time.Millisecond)
	to := time.Now()
	p.Stop()
	plain.Stop()
	held, other := p.HeldBack(from, to), plain.HeldBack(from, to)
	t.Logf("watching: %s; not: %s", p.Summary(from, to), plain.Summary(from, to))
	// Six spinners on one CPU: each waits about 5/6 of the time (330 ms
	// of 400). The kernel adds a wait to a thread's count when the wait
	// ends, so one begun before the interval may count in it too: at
	// most twice the time sampled.
	ss := p.bracket(from, to)
	if span := ss[len(ss)-1].at.Sub(ss[0].at); held < 200*time.Millisecond || held > 2*span {
		t.Errorf("a process that waited ~330 ms of %v for its CPU: held back %v (sampled over %v)", to.Sub(from), held, span)
	}
	if held-other < 100*time.Millisecond {
		t.Errorf("held back %v watching the starved process, %v not watching it", held, other)
	}
	runtime.KeepAlive(watched)
}
