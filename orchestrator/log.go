package orchestrator

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// sweepLog is where a sweep says what it does: the terminal (through the
// progress display once there is one, nothing with --quiet) and
// <out>/mbench.log, every line redacted. Every part of a sweep writes
// through it.
type sweepLog struct {
	redactor func(string) string
	logPath  string // <out>/mbench.log
	quiet    bool
	stderr   io.Writer
	file     *os.File
	prog     *progress       // nil until the sweep's runs begin
	noted    map[string]bool // messages said once per sweep (noteOnce)
}

func newSweepLog(redact func(string) string, dir string, stderr io.Writer, quiet bool) *sweepLog {
	return &sweepLog{redactor: redact, logPath: filepath.Join(dir, "mbench.log"), stderr: stderr, quiet: quiet, noted: map[string]bool{}}
}

func (l *sweepLog) redact(str string) string { return l.redactor(str) }

func (l *sweepLog) logf(format string, args ...any) {
	msg := l.redact(fmt.Sprintf(format, args...))
	l.toLog(msg)
	if l.prog != nil {
		l.prog.log(msg)
		return
	}
	if !l.quiet {
		fmt.Fprintln(l.stderr, msg)
	}
}

// tracef records a detail (the exact command of every launch, say) in the
// sweep's mbench.log only, keeping the terminal for progress.
func (l *sweepLog) tracef(format string, args ...any) {
	l.toLog(l.redact(fmt.Sprintf(format, args...)))
}

// noteOnce logs a message the first time key is seen in this sweep.
func (l *sweepLog) noteOnce(key, format string, args ...any) {
	if l.noted[key] {
		return
	}
	l.noted[key] = true
	l.logf(format, args...)
}

// toLog appends a timestamped line to <out>/mbench.log.
func (l *sweepLog) toLog(msg string) {
	if l.file == nil {
		f, err := os.OpenFile(l.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return
		}
		l.file = f
	}
	fmt.Fprintf(l.file, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), msg)
}

// close closes mbench.log; a later line opens it again.
func (l *sweepLog) close() {
	if l.file != nil {
		l.file.Close()
		l.file = nil
	}
}
