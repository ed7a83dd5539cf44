// Package schedprobe measures, beside a timing test, how long the operating
// system held the test's processes back from running, independently of the
// code under test: a timing claim is asserted only when the machine let the
// test run, and a timing failure must coincide with a hold-back the probe
// saw.
//
// A probe samples every Period: its own wake-up lateness (a sleep of
// Period that ended late: the process, or the CPU it ran on, was not run),
// the run-queue wait of the threads of the watched processes (the
// kernel's schedstat: time runnable but not running; of each period, the
// longest wait of one thread, so that a busy machine's many short waits of
// many threads do not add up to a hold-back no thread had), and the
// machine's steal time (a virtual CPU the hypervisor did not run). A
// hold-back over an interval is the largest of the lateness of the
// wake-ups in it and of the wait and steal accrued between the samples
// that bracket it. The kernel counts a wait when it ends: a thread still
// waiting at a sample shows in the next.
package schedprobe

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Period is how often a probe samples.
const Period = 5 * time.Millisecond

// relist is how often a probe looks for new threads of the processes it
// watches (reading a known thread's counters is one pread).
const relist = 20

type sample struct {
	at   time.Time
	late time.Duration // how much later than asked the sleep before this sample ended
	held time.Duration // cumulative: each period's longest run-queue wait of a watched thread + steal time
}

// Probe samples until Stop (or the end of the test that started it).
type Probe struct {
	mu      sync.Mutex
	samples []sample
	pids    []int
	threads map[string]*thread // by /proc/<pid>/task/<tid>
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	// schedstat: the kernel exports per-thread run-queue wait
	// (CONFIG_SCHED_INFO); without it only wake-ups and steal count.
	schedstat bool
	stat      *os.File      // /proc/stat, for the machine's steal time
	stealTick time.Duration // one tick of /proc/stat
	steal     time.Duration // steal time at the last read
}

type thread struct {
	f    *os.File
	wait time.Duration
}

// Start starts a probe of this process; it stops when t ends.
func Start(t testing.TB) *Probe {
	p := &Probe{pids: []int{os.Getpid()}, threads: map[string]*thread{}, stop: make(chan struct{}), done: make(chan struct{}),
		stealTick: 10 * time.Millisecond} // USER_HZ is 100 on Linux
	p.stat, _ = os.Open("/proc/stat")
	p.mu.Lock()
	p.listThreads()
	_, p.schedstat = p.readHeld()
	p.mu.Unlock()
	p.samples = append(p.samples, p.sampleNow(0))
	go p.loop()
	t.Cleanup(p.Stop)
	return p
}

// Watch adds the threads of process pid (an engine the test started) to
// what the probe's run-queue wait counts.
func (p *Probe) Watch(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pids = append(p.pids, pid)
	p.listThreads()
	// Its wait so far is not in this run's window.
	for k, th := range p.threads {
		if strings.HasPrefix(k, "/proc/"+strconv.Itoa(pid)+"/") && th.wait == 0 {
			th.wait = readWait(th.f)
		}
	}
}

// Stop stops sampling; the samples stay readable.
func (p *Probe) Stop() {
	p.once.Do(func() {
		close(p.stop)
		<-p.done
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, th := range p.threads {
			th.f.Close()
		}
		if p.stat != nil {
			p.stat.Close()
		}
	})
}

func (p *Probe) loop() {
	defer close(p.done)
	tm := time.NewTimer(Period)
	defer tm.Stop()
	asked := time.Now()
	for n := 1; ; n++ {
		select {
		case <-p.stop:
			return
		case <-tm.C:
			// The channel's value is when the timer fired, not when this
			// goroutine ran: the lateness is to now.
			late := max(time.Since(asked)-Period, 0)
			p.mu.Lock()
			if n%relist == 0 {
				p.listThreads()
			}
			s := p.sampleNow(late)
			p.samples = append(p.samples, s)
			p.mu.Unlock()
			asked = time.Now()
			tm.Reset(Period)
		}
	}
}

// sampleNow reads the counters; p.mu is held (or the probe not yet shared).
func (p *Probe) sampleNow(late time.Duration) sample {
	held, _ := p.readHeld()
	prev := time.Duration(0)
	if n := len(p.samples); n > 0 {
		prev = p.samples[n-1].held
	}
	return sample{at: time.Now(), late: late, held: prev + held}
}

// readHeld returns the longest run-queue wait of one watched thread since
// the last read plus the steal time accrued, and whether any thread's
// schedstat could be read.
func (p *Probe) readHeld() (time.Duration, bool) {
	var d time.Duration
	ok := false
	for k, th := range p.threads {
		w := readWait(th.f)
		if w < 0 { // the thread has ended
			th.f.Close()
			delete(p.threads, k)
			continue
		}
		ok = true
		if w > th.wait {
			d = max(d, w-th.wait)
		}
		th.wait = w
	}
	if p.stat != nil {
		if st := readSteal(p.stat); st >= 0 {
			if st *= p.stealTick; p.samples != nil && st > p.steal {
				d += st - p.steal
			}
			p.steal = st
		}
	}
	return d, ok
}

// listThreads opens the schedstat of every thread of the watched processes
// not yet open; p.mu is held.
func (p *Probe) listThreads() {
	for _, pid := range p.pids {
		dir := "/proc/" + strconv.Itoa(pid) + "/task/"
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			k := dir + e.Name()
			if _, ok := p.threads[k]; ok {
				continue
			}
			f, err := os.Open(k + "/schedstat")
			if err != nil {
				continue
			}
			// A thread that started since the last sample: all its wait
			// is in this sample's period.
			p.threads[k] = &thread{f: f}
		}
	}
}

// readWait returns a thread's cumulative run-queue wait (the second field
// of schedstat), or -1 when it can no longer be read.
func readWait(f *os.File) time.Duration {
	var b [128]byte
	n, err := f.ReadAt(b[:], 0)
	if n == 0 && err != nil {
		return -1
	}
	fs := strings.Fields(string(b[:n]))
	if len(fs) < 2 {
		return -1
	}
	v, err := strconv.ParseInt(fs[1], 10, 64)
	if err != nil {
		return -1
	}
	return time.Duration(v)
}

// readSteal returns the machine's steal time in ticks (the eighth value
// of /proc/stat's cpu line), or -1.
func readSteal(f *os.File) time.Duration {
	var b [512]byte
	n, _ := f.ReadAt(b[:], 0)
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	fs := strings.Fields(line)
	if len(fs) < 9 || fs[0] != "cpu" {
		return -1
	}
	v, err := strconv.ParseInt(fs[8], 10, 64)
	if err != nil {
		return -1
	}
	return time.Duration(v)
}

// Available reports whether the kernel gave the watched threads' run-queue
// wait (without it a hold-back is seen only by the probe's wake-ups and
// steal time).
func (p *Probe) Available() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.schedstat
}

// bracket returns the samples from the last one at or before from to the
// first one at or after to (all there are on either side when none is).
func (p *Probe) bracket(from, to time.Time) []sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	lo, hi := 0, len(p.samples)-1
	for i, s := range p.samples {
		if !s.at.After(from) {
			lo = i
		}
	}
	for i := len(p.samples) - 1; i >= 0; i-- {
		if !p.samples[i].at.Before(to) {
			hi = i
		}
	}
	if hi < lo {
		hi = lo
	}
	return append([]sample(nil), p.samples[lo:hi+1]...)
}

// HeldBack returns how long the OS held the watched processes back during
// [from, to]: the largest of the lateness of the probe's wake-ups there
// and of the run-queue wait (each period's longest of one thread) and
// steal time accrued between the samples that bracket the interval.
func (p *Probe) HeldBack(from, to time.Time) time.Duration {
	ss := p.bracket(from, to)
	if len(ss) == 0 {
		return 0
	}
	d := ss[len(ss)-1].held - ss[0].held
	for _, s := range ss[1:] {
		d = max(d, s.late)
	}
	return d
}

// Worst returns the largest hold-back of one sample period within
// [from, to]: below a bound, the machine let the processes run to it
// throughout.
func (p *Probe) Worst(from, to time.Time) time.Duration {
	ss := p.bracket(from, to)
	var w time.Duration
	for i := 1; i < len(ss); i++ {
		w = max(w, ss[i].late, ss[i].held-ss[i-1].held)
	}
	return w
}

// Summary says what the probe saw in [from, to], for a test's log.
func (p *Probe) Summary(from, to time.Time) string {
	ss := p.bracket(from, to)
	if len(ss) < 2 {
		return "scheduler probe: no samples"
	}
	var lateMax time.Duration
	nLate := 0
	for _, s := range ss[1:] {
		lateMax = max(lateMax, s.late)
		if s.late > time.Millisecond {
			nLate++
		}
	}
	return fmt.Sprintf("scheduler probe over %v: %d samples, %d woke > 1 ms late (max %v); run-queue wait + steal %v (worst %v in one %v period; schedstat %v)",
		ss[len(ss)-1].at.Sub(ss[0].at).Round(time.Millisecond), len(ss), nLate, lateMax.Round(10*time.Microsecond),
		(ss[len(ss)-1].held - ss[0].held).Round(10*time.Microsecond), p.Worst(from, to).Round(10*time.Microsecond), Period, p.Available())
}
