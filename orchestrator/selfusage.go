package orchestrator

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
)

// selfUsage measures this process from /proc (Linux); fields it cannot read
// stay 0.
func selfUsage() *SelfUsage {
	u := &SelfUsage{Goroutines: runtime.NumGoroutine()}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range bytes.Split(b, []byte("\n")) {
			if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
				f := bytes.Fields(rest)
				if len(f) > 0 {
					u.RSSKiB, _ = strconv.ParseInt(string(f[0]), 10, 64)
				}
			}
		}
	}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		u.FDs = len(ents)
	}
	return u
}
