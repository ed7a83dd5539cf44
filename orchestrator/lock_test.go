package orchestrator

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// TestLockDir: a held lock refuses at once when its record names another
// process, waits briefly when it names none (just released) or this one, and
// is taken as soon as it is released; temporary files are cleaned. On
// synctest's clock: "at once" is no time at all, on any machine.
func TestLockDir(t *testing.T) {
	synctest.Test(t, testLockDir)
}

func testLockDir(t *testing.T) {
	dir := t.TempDir()
	a, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Another process's record: refused at once, naming it.
	rec := filepath.Join(dir, LockFile)
	if err := os.WriteFile(rec, []byte(`{"pid":1,"host":"h","command":"mbench run m.yaml","since":"2026-12-01T00:00:00Z"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	var le *LockedError
	if _, err := lockDir(dir); !errors.As(err, &le) || le.Holder.PID != 1 || time.Since(t0) != 0 {
		t.Fatalf("second lock: %v after %v; want a LockedError naming pid 1 at once", err, time.Since(t0))
	}
	// Released while the second waits: taken.
	if err := os.WriteFile(rec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		b, err := lockDir(dir)
		if err == nil {
			b.Unlock()
		}
		done <- err
	}()
	a.Unlock()
	if err := <-done; err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	// Temporary files of an interrupted atomic write are removed, others kept.
	tmp := filepath.Join(dir, "cells", ".summary_A.json.tmp-42")
	keep := filepath.Join(dir, "cells", "summary_A.json")
	os.MkdirAll(filepath.Dir(tmp), 0o755)
	os.WriteFile(tmp, []byte("half"), 0o644)
	os.WriteFile(keep, []byte("{}"), 0o644)
	if got := cleanTemps(dir); len(got) != 1 || got[0] != tmp {
		t.Errorf("cleaned %v, want %s", got, tmp)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a real file was removed: %v", err)
	}
}
