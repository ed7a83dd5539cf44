package orchestrator

import "testing"

// TestLogCause: the cause of a start failure is the engine's last line, not
// Slurm's launcher's after it, nor an empty line; an empty log falls back
// to how the process ended. Causes that differ only in numbers (a
// timestamp, a pid, a step id) are the same cause.
func TestLogCause(t *testing.T) {
	for _, c := range []struct{ tail, want string }{
		{"loading model\nsh: 1: llama-server: not found\n", "sh: 1: llama-server: not found"},
		{"mbench: sim: --token-budget: -5 is invalid\nsrun: error: vm: task 0: Exited with exit code 2\nsrun: launch/slurm: _step_signal: Terminating StepId=105.8\n\n", "mbench: sim: --token-budget: -5 is invalid"},
		{"\n\n", "exit status 127"},
	} {
		if got := logCause(c.tail, "exit status 127"); got != c.want {
			t.Errorf("logCause(%q) = %q, want %q", c.tail, got, c.want)
		}
	}
	a := &startError{cause: "12:00:01 torch.OutOfMemoryError: CUDA out of memory (pid 4711)"}
	b := &startError{cause: "12:03:17 torch.OutOfMemoryError: CUDA out of memory (pid 5802)"}
	if !a.sameCause(b) || a.sameCause(&startError{cause: "error: unknown flag --bogus"}) {
		t.Error("sameCause: numbers must not tell causes apart, words must")
	}
}
