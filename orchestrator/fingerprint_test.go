package orchestrator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/results"
)

func writeGPUs(t *testing.T, dir, host string, names ...string) {
	t.Helper()
	var b strings.Builder
	for i, n := range names {
		fmt.Fprintf(&b, `{"ts_us":%d,"host":%q,"gpu":%d,"uuid":"GPU-%d","name":%q,"util_gpu":1}`+"\n", 1000+i, host, i, i, n)
	}
	if err := os.WriteFile(filepath.Join(dir, "gpu.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRunGPUsFingerprint: the GPUs a host's probe reports are recorded on
// the first run, a later run on other GPUs is refused, and --force accepts
// the change.
func TestRunGPUsFingerprint(t *testing.T) {
	s := viewSweep(t, results.VerdictOK, results.VerdictOK, results.VerdictOK, results.VerdictOK)
	s.state.Fingerprint = map[string]string{}
	run := t.TempDir()

	writeGPUs(t, run, "gpu0", "NVIDIA H200", "NVIDIA H200")
	if err := s.store.checkRunGPUs(run, s.opts.Force); err != nil {
		t.Fatal(err)
	}
	if got := s.state.Fingerprint["gpus@gpu0"]; got != "NVIDIA H200,NVIDIA H200" {
		t.Fatalf("recorded %q", got)
	}
	if _, err := ReadSweep(s.dir); err != nil {
		t.Fatalf("sweep.json not written: %v", err)
	}

	writeGPUs(t, run, "gpu0", "NVIDIA H20", "NVIDIA H20")
	err := s.store.checkRunGPUs(run, s.opts.Force)
	if !errors.Is(err, errFingerprint) || !strings.Contains(err.Error(), `"NVIDIA H20,NVIDIA H20"`) {
		t.Fatalf("other GPUs: err %v, want a fingerprint error naming them", err)
	}

	s.opts.Force = true
	if err := s.store.checkRunGPUs(run, s.opts.Force); err != nil {
		t.Fatalf("forced: %v", err)
	}
	if got := s.state.Fingerprint["gpus@gpu0"]; got != "NVIDIA H20,NVIDIA H20" {
		t.Errorf("forced change not recorded: %q", got)
	}
}
