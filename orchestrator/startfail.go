package orchestrator

import (
	"fmt"
	"regexp"
	"strings"
)

// startError is an engine process that failed before it was ready: it
// exited, or never answered its ready check in time. Its message names the
// command and quotes the log's last lines; cause is the last line of that
// log, where an engine says why it stopped (the shell's "not found", an
// out-of-memory error, a flag it does not know).
type startError struct {
	msg      string
	cause    string
	logPath  string // the engine log, on hostName
	hostName string
}

func (e *startError) Error() string { return e.msg }

// sameCause reports whether two start failures have the same cause: the
// same last log line once its numbers (timestamps, pids, addresses) are
// masked.
func (e *startError) sameCause(o *startError) bool {
	return numbers.ReplaceAllString(e.cause, "#") == numbers.ReplaceAllString(o.cause, "#")
}

var numbers = regexp.MustCompile(`[0-9]+`)

// logCause is the last line of a log tail that the engine wrote (not
// Slurm's launcher, whose "srun: … Terminating StepId=…" follows any step
// that exits), or otherwise (nothing else in the log) what the process's
// end says.
func logCause(tail, otherwise string) string {
	lines := strings.Split(strings.TrimSpace(tail), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "srun: ") && !strings.HasPrefix(l, "slurmstepd: ") {
			return l
		}
	}
	return otherwise
}

// configStartError is a config whose engine failed before it was ready on
// its launch and on its one relaunch, with the same cause: every run of the
// config would fail the same way, so the sweep launches it no more.
type configStartError struct {
	config   string
	launches int
	last     *startError
}

func (e *configStartError) Error() string {
	return fmt.Sprintf("config %s: its engine failed before it was ready on %d launches with the same cause: %s\n%s",
		e.config, e.launches, e.last.cause, e.last.msg)
}

func (e *configStartError) Unwrap() error { return e.last }
