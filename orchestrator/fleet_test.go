package orchestrator

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
)

// fakeHost is a hosts.Host that runs nothing: it answers $HOME like a
// chatty login shell, counts forwards and records Close.
type fakeHost struct {
	name     string
	runs     []string
	forwards int
	closed   bool
}

func (h *fakeHost) Name() string { return h.name }
func (h *fakeHost) Run(_ context.Context, cmd string) ([]byte, []byte, error) {
	h.runs = append(h.runs, cmd)
	if strings.Contains(cmd, "$HOME") {
		return []byte("Welcome to the cluster!\n/home/alice\n"), nil, nil
	}
	return nil, nil, nil
}
func (h *fakeHost) Start(context.Context, hosts.ProcSpec) (hosts.Process, error) {
	return nil, errors.New("fakeHost starts nothing")
}
func (h *fakeHost) Put(context.Context, io.Reader, string, os.FileMode) error { return nil }
func (h *fakeHost) Get(context.Context, string, int64, io.Writer) (int64, error) {
	return 0, nil
}
func (h *fakeHost) Size(context.Context, string) (int64, error) { return 0, nil }
func (h *fakeHost) Forward(_ context.Context, addr string) (string, error) {
	h.forwards++
	return "127.0.0.1:40001", nil
}
func (h *fakeHost) Close() error { h.closed = true; return nil }

const fleetMatrix = `name: f
seed: 1
hosts:
  here: {address: local, gpus: [0]}
  gpu1: {address: alice@gpu1:2222, gpus: [0], tunnel: true}
  gpu2: {address: gpu2, gpus: [0], workdir: /scratch/mb}
engine: {kind: vllm, model: m, command: "vllm serve {{.Model}} --port {{.Port}} {{.ConfigArgs}}"}
configs: {plain: {topology: {hosts: [here, gpu1, gpu2]}}}
rates: [1]
shapes: [{input: 8, output: 2}]
measure: {min_completed: 1}
`

// loadFleetMatrix loads fleetMatrix as a user's file is loaded.
func loadFleetMatrix(t *testing.T) (*matrices.Matrix, error) {
	path := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(path, []byte(fleetMatrix), 0o644); err != nil {
		t.Fatal(err)
	}
	return matrices.Load(path)
}

func TestFleet(t *testing.T) {
	m, err := loadFleetMatrix(t)
	if err != nil {
		t.Fatal(err)
	}
	f := newFleet(m, "/res/sweep", "f-0123", newSweepLog(m.Redact, t.TempDir(), io.Discard, true), Options{})
	dialled := map[string]*fakeHost{}
	f.dial = func(_ context.Context, cfg hosts.SSHConfig) (hosts.Host, error) {
		if dialled[cfg.Name] != nil {
			t.Errorf("host %s dialled twice", cfg.Name)
		}
		h := &fakeHost{name: cfg.Name}
		dialled[cfg.Name] = h
		return h, nil
	}
	ctx := context.Background()
	for range 2 {
		for _, name := range []string{"here", "gpu1", "gpu2"} {
			if _, err := f.host(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(dialled) != 2 {
		t.Errorf("dialled %d hosts, want the 2 remote ones", len(dialled))
	}
	if _, err := f.host(ctx, "nosuch"); err == nil {
		t.Error("an unknown host was dialled")
	}
	for _, c := range []struct{ host, want string }{
		{"here", filepath.Join("/res/sweep", ".state", "pids")},
		{"gpu1", "/home/alice/.mbench/f-0123/pids"}, // the chatty shell's last line is $HOME
		{"gpu2", "/scratch/mb/f-0123/pids"},
	} {
		if got := f.path(c.host, "pids"); got != c.want {
			t.Errorf("path(%s) = %s, want %s", c.host, got, c.want)
		}
	}
	for _, c := range []struct {
		host, want string
		forwards   int
	}{
		{"here", "http://127.0.0.1:8000", 0},
		{"gpu1", "http://127.0.0.1:40001", 1}, // tunnelled, once
		{"gpu2", "http://gpu2:8000", 0},
	} {
		for range 2 {
			got, err := f.reach(ctx, c.host, 8000)
			if err != nil || got != c.want {
				t.Errorf("reach(%s) = %s, %v; want %s", c.host, got, err, c.want)
			}
		}
		if h := dialled[c.host]; h != nil && h.forwards != c.forwards {
			t.Errorf("%s: %d forwards, want %d", c.host, h.forwards, c.forwards)
		}
	}
	f.close()
	for name, h := range dialled {
		if !h.closed {
			t.Errorf("%s not closed", name)
		}
	}
}

// reach returns the base URL at which mbench reaches port on a host: loopback
// for the local host, an SSH tunnel when the host asks for one, else the
// host's address.
func (f *fleet) reach(ctx context.Context, hostName string, port int) (string, error) {
	return f.reachNode(ctx, hostName, 0, port)
}
