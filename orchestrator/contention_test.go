package orchestrator

import (
	"context"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mbench/mbench/internal/cpupin"
	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/probes"
)

// TestPinningValidation: --client-cpus must name CPUs mbench may run on
// and leave one for the engine; the errors say which.
func TestPinningValidation(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	all, err := cpupin.Allowed(0)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := newPinning(nil); p != nil || err != nil {
		t.Errorf("no CPUs: %v, %v; want no pinning", p, err)
	}
	if _, err := newPinning(all); err == nil || !strings.Contains(err.Error(), "none would be left for a local engine") {
		t.Errorf("every CPU: %v", err)
	}
	if _, err := newPinning([]int{100000}); err == nil || !strings.Contains(err.Error(), "CPU 100000 is not one mbench may run on") {
		t.Errorf("a CPU mbench may not use: %v", err)
	}
	if len(all) < 2 {
		return
	}
	p, err := newPinning(all[:1])
	if err != nil || !slices.Equal(p.engine(), all[1:]) {
		t.Errorf("one CPU: %+v, %v", p, err)
	}
}

// TestKeepOff: a local engine's process tree (a shell leading its group
// and its child), started on every CPU, is moved off the load generator's
// CPU, and keeps the others.
func TestKeepOff(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	all, _ := cpupin.Allowed(0)
	if len(all) < 2 {
		t.Skip("needs two CPUs to split")
	}
	cmd := exec.Command("sh", "-c", "sleep 600 & echo $!; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	buf := make([]byte, 32)
	if _, err := out.Read(buf); err != nil { // the child has started
		t.Fatal(err)
	}
	p := &pinning{client: all[:1], all: all}
	snap, err := probes.ReadCPU(context.Background(), hosts.NewLocal())
	if err != nil {
		t.Fatal(err)
	}
	tree := snap.Tree([]int{cmd.Process.Pid})
	if len(tree) != 2 {
		t.Fatalf("tree %v, want the shell and its child", tree)
	}
	if err := p.keepOff(snap, []int{cmd.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	for _, pid := range tree {
		if got, err := cpupin.Allowed(pid); err != nil || !slices.Equal(got, all[1:]) {
			t.Errorf("pid %d runs on %v (%v), want %v", pid, got, err, all[1:])
		}
	}
	// Now on the load generator's CPU only: that is an error, not a move.
	if err := cpupin.Processes(tree, all[:1]); err != nil {
		t.Fatal(err)
	}
	if err := p.keepOff(snap, []int{cmd.Process.Pid}); err == nil || !strings.Contains(err.Error(), "all of them the load generator's") {
		t.Errorf("an engine on the load generator's CPU only: %v", err)
	}
}

// engine is the CPUs left to local engines.
func (p *pinning) engine() []int { return cpupin.Without(p.all, p.client) }
