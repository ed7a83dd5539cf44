package durable

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "summary_A.json")
	for _, content := range []string{"first", "second, longer content"} {
		if err := WriteFile(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != content {
			t.Fatalf("read back %q, %v; want %q", b, err, content)
		}
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temp files)", len(es))
	}
	for name, temp := range map[string]bool{".summary_A.json.tmp-123": true, "summary_A.json": false, ".hidden": false, "x.tmp-1": false} {
		if IsTemp(name) != temp {
			t.Errorf("IsTemp(%q) = %v", name, !temp)
		}
	}
	err := WriteFile(filepath.Join(dir, "missing", "x"), []byte("x"), 0o644)
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing directory: err = %v", err)
	}
}

func TestAppendLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := AppendLine(p, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := AppendLine(p, []byte("{\"b\":2}\n")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := AppendLine(p, []byte(strings.Repeat("x", 100))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 22 || lines[0] != `{"a":1}` || lines[1] != `{"b":2}` {
		t.Fatalf("journal = %q", b)
	}
	for _, l := range lines[2:] {
		if l != strings.Repeat("x", 100) {
			t.Errorf("interleaved line %q", l)
		}
	}
	if err := AppendLine(filepath.Join(t.TempDir(), "no", "dir"), []byte("x")); err == nil {
		t.Error("missing directory: want an error")
	}
}

// TestAppendLineCutsBackPartialWrite: an append that a full disk stops part
// way leaves the file as it was — no torn line for the next append to build
// on — and says the disk is full. The disk is a tmpfs of a few pages.
func TestAppendLineCutsBackPartialWrite(t *testing.T) {
	mnt := t.TempDir()
	if b, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("needs root to mount a tmpfs: %v: %s", err, b)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	p := filepath.Join(mnt, "journal.jsonl")
	if err := AppendLine(p, []byte("first")); err != nil {
		t.Fatal(err)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &fs); err != nil {
		t.Fatal(err)
	}
	// Leave one free page: the line below needs two more.
	if err := os.WriteFile(filepath.Join(mnt, "filler"), make([]byte, (int64(fs.Bavail)-1)*fs.Bsize), 0o644); err != nil {
		t.Fatal(err)
	}
	err := AppendLine(p, []byte(strings.Repeat("x", 3*int(fs.Bsize))))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append to a full disk: %v, want ENOSPC", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "first\n" {
		t.Errorf("after the failed append the file holds %d bytes, want the old line alone", len(b))
	}
}
