package hosts

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/sshdtest"
	"github.com/mbench/mbench/shquote"
)

// TestKill9OfMbench kills -9 a child process that started an engine (as a
// crashed mbench would). Over SSH the tether kills the engine, and the
// process it started that left its group and lost its parent; locally the
// engine survives and is found and stopped through its pidfile.
func TestKill9OfMbench(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"local", "sshd", "sshd-escaped"} {
		t.Run(k, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			spec := testSpec(t, "victim", "sleep 1000")
			escaped := filepath.Join(t.TempDir(), "escaped")
			env := []string{"MBENCH_HOSTS_CHILD=1", "CHILD_STATE=" + spec.StateDir}
			if k == "sshd-escaped" {
				env = append(env, "CHILD_CMD=sh -c "+shquote.Quote(`( setsid sleep 1000 & echo $! > "$0" ); sleep 1000`)+" "+shquote.Quote(escaped))
			}
			if strings.HasPrefix(k, "sshd") {
				s := sshdtest.Start(t)
				env = append(env, "CHILD_ADDR="+s.User+"@"+s.Addr, "CHILD_KEY="+s.ClientKeyPath,
					"CHILD_KH="+s.KnownHostsPath, "CHILD_CFG="+s.SSHConfigPath)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperMbenchChild$")
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pidc := make(chan int, 1)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if v, ok := strings.CutPrefix(sc.Text(), "engine-pid "); ok {
						n, _ := strconv.Atoi(v)
						pidc <- n
					}
				}
				close(pidc)
			}()
			var pid int
			select {
			case pid = <-pidc:
			case <-time.After(time.Minute): // a hang's bound
			}
			if pid == 0 {
				cmd.Process.Kill()
				t.Fatal("child did not report its engine")
			}
			child := 0
			if k == "sshd-escaped" {
				child = readChild(t, escaped, pid)
				t.Cleanup(func() { _ = killPid(child) })
			}
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if strings.HasPrefix(k, "sshd") {
				waitGone(t, pid, time.Minute)
				if child > 0 && !eventually(time.Minute, func() bool { return !alive(child) }) {
					t.Fatalf("the engine's escaped child %d survived the dropped connection", child)
				}
				return
			}
			time.Sleep(200 * time.Millisecond)
			if !alive(pid) {
				t.Fatal("local engine died with mbench; it should outlive it until resume")
			}
			ls, err := StopLeftovers(ctx, NewLocal(), spec.StateDir, testMarker, time.Second)
			if err != nil || len(ls) != 1 || ls[0].Pid != pid {
				t.Fatalf("StopLeftovers = %+v, %v", ls, err)
			}
			waitGone(t, pid, time.Minute)
		})
	}
}

// TestHelperMbenchChild is the child process of TestKill9OfMbench.
func TestHelperMbenchChild(t *testing.T) {
	if os.Getenv("MBENCH_HOSTS_CHILD") != "1" {
		t.Skip("helper process for TestKill9OfMbench")
	}
	ctx := context.Background()
	h := NewLocal()
	if addr := os.Getenv("CHILD_ADDR"); addr != "" {
		var err error
		h, err = DialSSH(ctx, SSHConfig{Address: addr, Identity: []string{os.Getenv("CHILD_KEY")},
			KnownHosts: os.Getenv("CHILD_KH"), SSHConfigPath: os.Getenv("CHILD_CFG")})
		if err != nil {
			t.Fatal(err)
		}
	}
	command := "sleep 1000"
	if c := os.Getenv("CHILD_CMD"); c != "" {
		command = c
	}
	p, err := h.Start(ctx, ProcSpec{Name: "victim", Command: command, StateDir: os.Getenv("CHILD_STATE"),
		Marker: testMarker, Tether: true})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("engine-pid %d\n", p.Pid())
	<-p.Done() // killed before this returns
}
