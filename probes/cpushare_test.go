package probes

import (
	"bufio"
	"context"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/process"
)

// snapText is CPUReadCommand's output as a login shell that prints a
// banner would give it: 2 CPUs, the engine's group 100 (a leader, a
// worker, and a grandchild that left the group with setsid), mbench (300)
// and an unrelated process (400).
func snapText(uptime float64, cpu0, cpu1 [8]int, ticks map[int]int) string {
	line := func(name string, v [8]int) string {
		s := name
		for _, x := range v {
			s += " " + strconv.Itoa(x)
		}
		return s + " 0 0\n"
	}
	var all [8]int
	for i := range all {
		all[i] = cpu0[i] + cpu1[i]
	}
	proc := func(pid, ppid, pgrp int, name string) string {
		return strconv.Itoa(pid) + " (" + name + ") S " + strconv.Itoa(ppid) + " " + strconv.Itoa(pgrp) +
			" 1 0 -1 0 0 0 0 0 " + strconv.Itoa(ticks[pid]) + " 0 0 0 20 0 1 0 500 0 0\n"
	}
	return "welcome to the host\n" + cpuMarker + "\n100\n" + strconv.FormatFloat(uptime, 'f', 2, 64) + " 9.00\n" +
		line("cpu", all) + line("cpu0", cpu0) + line("cpu1", cpu1) +
		proc(100, 1, 100, "llama-server") + proc(101, 100, 100, "worker (a) b") + proc(102, 101, 102, "setsid child") +
		proc(300, 1, 300, "mbench") + proc(400, 1, 400, "other") +
		"401 (zombie) Z 1 100 1 0 -1 0 0 0 0 0 7 0 0 0 20 0 1 0 500 0 0\n"
}

// TestCPUSnapshotSummaries: two scripted readings 10 s apart give the
// engine tree's CPU (its three processes, the zombie and the unrelated
// process left out), the host's busy and stolen share, mbench's own, and
// what else ran on the load generator's core.
func TestCPUSnapshotSummaries(t *testing.T) {
	a, err := parseCPUSnapshot([]byte(snapText(1000, [8]int{0, 0, 0, 0, 0, 0, 0, 0}, [8]int{0, 0, 0, 0, 0, 0, 0, 0}, map[int]int{100: 50, 101: 10, 300: 5})))
	if err != nil {
		t.Fatal(err)
	}
	// cpu0 (the load generator's): 600 user + 100 system + 100 steal of
	// 1000 ticks, of which mbench 300 ticks; cpu1: 200 busy of 1000; the
	// host: 900 busy of 2000.
	b, err := parseCPUSnapshot([]byte(snapText(1010, [8]int{600, 0, 100, 200, 0, 0, 0, 100}, [8]int{150, 0, 0, 800, 0, 50, 0, 0}, map[int]int{100: 250, 101: 310, 102: 40, 300: 305, 400: 999})))
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Tree([]int{100}); !slices.Equal(got, []int{100, 101, 102}) {
		t.Fatalf("tree %v, want [100 101 102]", got)
	}
	h, ok := SummarizeEngineHost("h1", a, b, []int{100}, true)
	// engine: (200 + 300 + 40) ticks / 100 per s / 10 s = 54% of a core
	if !ok || h.Procs != 3 || h.Cores != 2 || !near(h.EngineCPUPct, 54) || !near(h.BusyPct, 45) || !near(h.StealPct, 5) ||
		!h.WithMbench {
		t.Errorf("engine host %+v, want 3 procs, 2 cores, engine 54%%, busy 45%%, steal 5%%, with mbench", h)
	}
	if _, ok := SummarizeEngineHost("h1", b, b, []int{100}, false); ok {
		t.Error("no time passed, yet a summary")
	}
	l, ok := SummarizeLoadGenCores(a, b, []int{0}, 300)
	// cpu0: 700 busy − 300 mbench = 400 of 1000; steal 100 of 1000
	if !ok || l.CPUs != "0" || !near(l.OtherPct, 40) || !near(l.StealPct, 10) || !l.Shared {
		t.Errorf("load generator cores %+v, want other 40%%, steal 10%%, shared", l)
	}
	if l, _ := SummarizeLoadGenCores(a, b, []int{1}, 0); l.Shared || !near(l.OtherPct, 20) {
		t.Errorf("cpu1 %+v, want other 20%%, not shared", l)
	}
	if _, ok := SummarizeLoadGenCores(a, b, []int{0, 7}, 300); ok {
		t.Error("a CPU the host does not have, yet a summary")
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestParseCPUSnapshotErrors(t *testing.T) {
	for _, in := range []string{"", "no marker\n", cpuMarker + "\nx\n1 2\ncpu 1 2 3 4 5 6 7 8\n", cpuMarker + "\n100\n1.0 2\n", cpuMarker + "\n100\n1.0 2\ncpu 1 2\n"} {
		if _, err := parseCPUSnapshot([]byte(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestFormatCPUs(t *testing.T) {
	if got := formatCPUs([]int{6, 0, 1, 2, 3, 9, 10}); got != "0-3,6,9-10" {
		t.Errorf("got %q", got)
	}
}

// shRunner runs CPUReadCommand as a host does: sh -c.
type shRunner struct{}

func (shRunner) Run(ctx context.Context, cmd string) ([]byte, []byte, error) {
	out, err := exec.CommandContext(ctx, "sh", "-c", cmd).Output()
	return out, nil, err
}

// TestReadCPURealTree: a real process group (a shell, a sleeping child, a
// grandchild that left the group with setsid, and a child that worked and
// stopped itself) is found whole by ReadCPU through sh, and a stopped
// process's CPU seconds are what the kernel reports for it (gopsutil's
// reading of the same pid).
func TestReadCPURealTree(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	cmd := exec.Command("sh", "-c", `sleep 600 & echo $!; setsid sleep 600 & echo $!; sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; kill -STOP $$' & echo $!; wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	var kids []int
	for len(kids) < 3 && sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		kids = append(kids, pid)
	}
	if len(kids) < 3 {
		t.Fatal("the shell did not print its children")
	}
	t.Cleanup(func() { _ = syscall.Kill(kids[1], syscall.SIGKILL) }) // the setsid one, out of the group
	busy := kids[2]
	for !stopped(t, busy) { // a condition, not a time bound
		time.Sleep(10 * time.Millisecond)
	}
	s, err := ReadCPU(t.Context(), shRunner{})
	if err != nil {
		t.Fatal(err)
	}
	tree := s.Tree([]int{cmd.Process.Pid})
	for _, pid := range append([]int{cmd.Process.Pid}, kids...) {
		if !slices.Contains(tree, pid) {
			t.Errorf("pid %d missing from the tree %v", pid, tree)
		}
	}
	if slices.Contains(tree, os.Getpid()) {
		t.Errorf("the tree %v holds the test itself", tree)
	}
	got, ok := s.CPUSeconds(busy)
	if !ok {
		t.Fatalf("no CPU for pid %d", busy)
	}
	p, err := process.NewProcess(int32(busy))
	if err != nil {
		t.Fatal(err)
	}
	want, err := p.Times()
	if err != nil {
		t.Fatal(err)
	}
	if !near(got, want.User+want.System) {
		t.Errorf("pid %d: %v CPU seconds, the kernel says %v", busy, got, want.User+want.System)
	}
	if len(s.CPUs) != runtime.NumCPU() && len(s.CPUs) < 1 {
		t.Errorf("%d CPUs read", len(s.CPUs))
	}
}

// stopped says whether pid is stopped (state T).
func stopped(t *testing.T, pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseProcStat(b)
	if err != nil {
		t.Fatal(err)
	}
	return st.state == 'T' || strings.Contains(string(b), ") T ")
}

// CPUSeconds is the user+system time of pid, its waited-for children's
// included, as the kernel reports it, in seconds; false when s has no such
// process.
func (s *CPUSnapshot) CPUSeconds(pid int) (float64, bool) {
	p, ok := s.Procs[pid]
	return float64(p.ticks) / s.Tick, ok
}
