package results

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "summary_A.json")
	for _, content := range []string{"first", "second, longer content"} {
		if err := WriteFileAtomic(p, []byte(content), 0o640); err != nil {
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
	err := WriteFileAtomic(filepath.Join(dir, "missing", "x"), []byte("x"), 0o644)
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing directory: err = %v", err)
	}
}

func TestAppendLineSync(t *testing.T) {
	p := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := AppendLineSync(p, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := AppendLineSync(p, []byte("{\"b\":2}\n")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := AppendLineSync(p, []byte(strings.Repeat("x", 100))); err != nil {
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
	if err := AppendLineSync(filepath.Join(t.TempDir(), "no", "dir"), []byte("x")); err == nil {
		t.Error("missing directory: want an error")
	}
}
