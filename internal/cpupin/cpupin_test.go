package cpupin

import (
	"os/exec"
	"reflect"
	"runtime"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{"0,1", []int{0, 1}, false}, {"2-5", []int{2, 3, 4, 5}, false}, {"0,4-5,0", []int{0, 4, 5}, false},
		{"", nil, true}, {"1,", nil, true}, {"a", nil, true}, {"3-1", nil, true}, {"-1", nil, true},
	} {
		got, err := Parse(c.in)
		if (err != nil) != c.bad || !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v (error %v)", c.in, got, err, c.want, c.bad)
		}
	}
	if Format([]int{0, 4, 5}) != "0,4,5" {
		t.Error("Format")
	}
}

// TestSelf: pinned to CPU 0, every thread of the process, and one started
// after, runs on CPU 0 only.
func TestSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	if err := Self([]int{0}); err != nil {
		t.Fatal(err)
	}
	done := make(chan []int)
	go func() {
		runtime.LockOSThread() // a thread of its own, maybe a new one
		defer runtime.UnlockOSThread()
		cpus, _ := Allowed(0)
		done <- cpus
	}()
	if got := <-done; !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("a thread runs on %v, want [0]", got)
	}
	if got, _ := Allowed(0); !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("this thread runs on %v, want [0]", got)
	}
}

// TestProcesses: a child pinned to CPU 0 by pid runs on CPU 0 only, and a
// pid that is gone is no error.
func TestProcesses(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := Processes([]int{cmd.Process.Pid, 1 << 30}, []int{0}); err != nil {
		t.Fatal(err)
	}
	if got, err := Allowed(cmd.Process.Pid); err != nil || !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("the child runs on %v (%v), want [0]", got, err)
	}
	if got := Without([]int{3, 0, 1, 2}, []int{1, 5}); !reflect.DeepEqual(got, []int{3, 0, 2}) {
		t.Errorf("Without = %v", got)
	}
}
