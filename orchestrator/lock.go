package orchestrator

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mbench/mbench/internal/durable"
)

// LockFile is the name of the lock of a results directory.
const LockFile = ".mbench.lock"

// dirLock is the exclusive hold of one process on a results directory: run,
// resume and export take it, so two processes never write one sweep. It is
// a flock(2) on LockFile, which the kernel drops when the process dies (kill
// -9 included): a lock left by a dead process is free, and its holder record
// is overwritten by the next taker.
type dirLock struct {
	f *os.File
}

// LockHolder is what the lock file says of the process holding it.
type LockHolder struct {
	PID     int       `json:"pid"`
	Host    string    `json:"host"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

// LockedError is returned when another process holds the directory (mbench
// exits 4 on it).
type LockedError struct {
	Dir    string
	Holder LockHolder // zero when the lock file could not be read
}

func (e *LockedError) Error() string {
	h := e.Holder
	if h.PID == 0 {
		return fmt.Sprintf("results directory %s is in use by another mbench process", e.Dir)
	}
	return fmt.Sprintf("results directory %s is in use by another mbench process: pid %d on %s since %s, running %q; wait for it to finish (or stop it) and try again",
		e.Dir, h.PID, h.Host, h.Since.Local().Format(time.DateTime), h.Command)
}

// lockDir takes the exclusive lock of the results directory dir, which must
// exist. It fails at once with a *LockedError naming the holder when another
// process has it.
func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock results directory: %w", err)
	}
	// A lock just released can still be held for an instant: a child forked
	// by this process between its fork and exec shares the lock's open file
	// until exec closes it. The releaser empties the holder record first, so
	// an empty record (or one naming this process) is waited for, briefly;
	// another live process's lock is refused at once.
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock results directory %s: %w", dir, err)
		}
		le := &LockedError{Dir: dir}
		if b, rerr := os.ReadFile(path); rerr == nil {
			_ = json.Unmarshal(b, &le.Holder)
		}
		if (le.Holder.PID != 0 && le.Holder.PID != os.Getpid()) || !time.Now().Before(deadline) {
			f.Close()
			return nil, le
		}
		time.Sleep(10 * time.Millisecond)
	}
	host, _ := os.Hostname()
	rec, _ := json.Marshal(LockHolder{PID: os.Getpid(), Host: host, Command: strings.Join(os.Args, " "), Since: time.Now().UTC()})
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(append(rec, '\n'), 0)
	}
	return &dirLock{f: f}, nil
}

// Unlock releases the lock; the file stays.
func (l *dirLock) Unlock() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = l.f.Close() // closing drops the flock
	l.f = nil
}

// cleanTemps removes the temporary files that an atomic write interrupted by
// kill -9 leaves (durable.IsTemp) anywhere in the results directory. Only a lock holder may call it: a live
// writer's temporary file would otherwise vanish under it.
func cleanTemps(dir string) []string {
	var removed []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == ".state" {
			return filepath.SkipDir // engines' own files
		}
		name := d.Name()
		if !d.IsDir() && durable.IsTemp(name) {
			if os.Remove(path) == nil {
				removed = append(removed, path)
			}
		}
		return nil
	})
	return removed
}
