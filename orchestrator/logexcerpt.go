package orchestrator

import (
	"regexp"
	"strings"
)

// excerptScan is how many of a failed engine's last log lines are read for
// its error message: the last 20 are quoted, the rest searched for an
// earlier error.
const excerptScan = 200

// exceptionLine matches a line that names a Python exception: "…Error: …",
// "…Exception: …" (vLLM's processes prefix their lines with
// "(EngineCore pid=N) ERROR … ]").
var exceptionLine = regexp.MustCompile(`(?:^|[\s\]])([A-Za-z_][\w.]*(?:Error|Exception)): \S`)

// logExcerpt is the last keep lines of tail and, where a line above them
// names an exception that they do not, the last such line first. A failed
// vLLM start ends its log with the API server's "RuntimeError: Engine core
// initialization failed. See root cause above", the engine core's own error
// (a ModuleNotFoundError, an out-of-memory) tens of lines further up:
// without it the message says only that something failed.
func logExcerpt(tail string, keep int) string {
	lines := strings.Split(strings.TrimRight(tail, "\n"), "\n")
	if len(lines) <= keep {
		return tail
	}
	shown := strings.Join(lines[len(lines)-keep:], "\n")
	for i := len(lines) - keep - 1; i >= 0; i-- {
		m := exceptionLine.FindStringSubmatchIndex(lines[i])
		if m == nil {
			continue
		}
		exc := strings.TrimSpace(lines[i][m[2]:])
		if strings.Contains(shown, exc) {
			return shown
		}
		return "earlier in the log: " + strings.TrimSpace(lines[i]) + "\n…\n" + shown
	}
	return shown
}
