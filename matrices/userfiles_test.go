package matrices

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// hostilePaths makes a FIFO and an 8 GiB sparse file in dir and returns
// them with /dev/zero, each with the words its refusal must carry.
func hostilePaths(t *testing.T, dir string) map[string]string {
	t.Helper()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 8<<30); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	return map[string]string{fifo: "is a FIFO (named pipe), not a regular file", "/dev/zero": "is a device, not a regular file",
		big: "is 8.0 GiB; limit %s: is this the right file?"}
}

// allocated runs fn and returns the bytes it allocated.
func allocated(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestHostileFilesRefused: a FIFO, /dev/zero and an 8 GiB file given as
// the matrix, a trace or a dataset are refused with a message naming the
// field, without reading them (a FIFO's open would block the test forever,
// /dev/zero's read would never end; the allocations stay far under 100 MB).
func TestHostileFilesRefused(t *testing.T) {
	dir := t.TempDir()
	for path, want := range hostilePaths(t, dir) {
		var err error
		if n := allocated(func() { _, err = Load(path) }); n > 100<<20 {
			t.Errorf("matrix %s: %d bytes allocated", path, n)
		}
		if w := strings.Replace(want, "%s", "4 MiB", 1); err == nil || !strings.Contains(err.Error(), "cannot read matrix: matrix file "+w) {
			t.Errorf("matrix %s: %v, want %q", path, err, w)
		}
		for _, c := range []struct{ shape, field, limit string }{
			{"{name: t, trace: {path: '" + path + "'}}", "shapes[0].trace.path: trace file " + path + " ", "2 GiB"},
			{"{name: d, output: 8, dataset: {path: '" + path + "', format: jsonl}}", "shapes[0].dataset.path: dataset file " + path + " ", "2 GiB"},
		} {
			m := filepath.Join(dir, "m.yaml")
			src := "name: n\nseed: 1\nengine: {kind: sim}\nconfigs: {a: {}}\nrates: [1]\nshapes: [" + c.shape + "]\nmeasure: {min_completed: 1}\n"
			if err := os.WriteFile(m, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			if n := allocated(func() { _, err = Load(m) }); n > 100<<20 {
				t.Errorf("%s: %d bytes allocated", c.shape, n)
			}
			if w := c.field + strings.Replace(want, "%s", c.limit, 1); err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q", c.shape, err, w)
			}
		}
	}
}
