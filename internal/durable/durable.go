// Package durable is mbench's one way of writing files that a crash (kill -9,
// a power cut, a full disk) cannot leave torn: a whole file replaced
// atomically (WriteFile), a line appended whole or not at all (AppendLine),
// each durable — fsynced, with its directory entry — when the call returns.
// Every file mbench writes into a results directory goes through it.
package durable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WriteFile writes data to path so that a reader (or a crash) sees either
// the old file or the complete new one, never a torn write: it writes a
// temporary file in the same directory (a name IsTemp recognises), fsyncs
// it, renames it over path and fsyncs the directory so the rename itself is
// durable. The parent directory must exist.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+tempMark+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	if err = SyncDir(dir); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// tempMark is in the name of every temporary file WriteFile makes:
// .<name>.tmp-<random>.
const tempMark = ".tmp-"

// IsTemp reports whether a file name is one of WriteFile's temporary files,
// which a write interrupted by kill -9 leaves behind.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempMark)
}

// AppendLine appends line (and a newline when it lacks one) to path,
// creating the file if needed, and fsyncs it: when it returns nil the line
// survives a crash. The line goes in one write on an O_APPEND descriptor, so
// concurrent appenders do not interleave within a line, and a write that
// fails part way (a full disk) is cut back to the file's old length, so a
// failed append never leaves a torn line for later appends to build on.
func AppendLine(path string, line []byte) error {
	if len(line) == 0 || line[len(line)-1] != '\n' {
		line = append(append(make([]byte, 0, len(line)+1), line...), '\n')
	}
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("append to %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("append to %s: %w", path, err)
	}
	n, err := f.Write(line)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		if n > 0 {
			if terr := f.Truncate(st.Size()); terr != nil {
				err = fmt.Errorf("%w (and cutting the partial line back failed: %v)", err, terr)
			} else {
				_ = f.Sync()
			}
		}
		f.Close()
		return fmt.Errorf("append to %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	if created {
		// A new directory entry is durable only once the directory is synced.
		return SyncDir(filepath.Dir(path))
	}
	return nil
}

// SyncDir fsyncs a directory, making the entries created, renamed or removed
// in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
