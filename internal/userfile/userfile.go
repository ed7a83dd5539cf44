// Package userfile opens the files a user names (a matrix, a trace, a
// dataset) for reading, refusing what cannot be one: anything but a regular
// file (a FIFO would block the open and every read, a device such as
// /dev/zero never ends, a directory has no content), and a file larger than
// the kind's limit (a model file given by mistake would be read whole). The
// refusal comes at once, before anything is read, in the user's terms.
package userfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// ErrRefused marks a file refused for its type or size (errors.Is).
var ErrRefused = errors.New("refused")

// refusal is a refusal's message; it is ErrRefused without saying so.
type refusal string

func (r refusal) Error() string        { return string(r) }
func (r refusal) Is(target error) bool { return target == ErrRefused }

func refuse(format string, args ...any) error { return refusal(fmt.Sprintf(format, args...)) }

// Open opens path for reading when it is a regular file of at most limit
// bytes; what names the kind of file in errors ("trace file"). O_NONBLOCK
// keeps the open of a FIFO from waiting for a writer; it changes nothing
// for a regular file. The file returned reads at most limit bytes, should
// the file grow after the check.
func Open(path, what string, limit int64) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := Check(fi, what, limit); err != nil {
		f.Close()
		return nil, err
	}
	return &File{File: f, r: &io.LimitedReader{R: f, N: limit}, what: what, limit: limit, Size: fi.Size()}, nil
}

// Check refuses fi when it is not a regular file or is larger than limit.
func Check(fi fs.FileInfo, what string, limit int64) error {
	switch m := fi.Mode(); {
	case m.IsDir():
		return refuse("%s is a directory, not a file", what)
	case m&fs.ModeNamedPipe != 0:
		return refuse("%s is a FIFO (named pipe), not a regular file", what)
	case m&fs.ModeDevice != 0:
		return refuse("%s is a device, not a regular file", what)
	case !m.IsRegular():
		return refuse("%s is not a regular file (%s)", what, m.Type())
	case fi.Size() > limit:
		return refuse("%s is %s; limit %s: is this the right file?", what, Size(fi.Size()), limitSize(limit))
	}
	return nil
}

// ReadFile reads path whole under Open's rules.
func ReadFile(path, what string, limit int64) ([]byte, error) {
	f, err := Open(path, what, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// File is an opened user file; Read stops at the limit with an error.
type File struct {
	*os.File
	Size  int64 // at the open
	r     *io.LimitedReader
	what  string
	limit int64
}

// Read reads the file, refusing to go beyond the limit it was opened with
// (a file that grew past it while being read).
func (f *File) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if errors.Is(err, io.EOF) && f.r.N <= 0 {
		var one [1]byte
		if k, _ := f.File.Read(one[:]); k > 0 {
			return n, refuse("%s grew past its limit %s while being read", f.what, limitSize(f.limit))
		}
	}
	return n, err
}

// Size formats n bytes in binary units with one decimal, as "8.0 GiB".
func Size(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, exp := float64(n)/1024, 0
	for ; v >= 1024 && exp < 5; exp++ {
		v /= 1024
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[exp])
}

// limitSize is Size without a trailing ".0": limits are round.
func limitSize(n int64) string { return strings.Replace(Size(n), ".0 ", " ", 1) }
