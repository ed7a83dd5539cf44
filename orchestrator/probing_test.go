package orchestrator

import (
	"testing"
	"time"
)

// TestProbeNamesOfAResumedSweep: the killed mbench and the one that resumes
// its sweep number their probes from 1 each, yet no name of one is a name
// of the other — not even when both started within one clock tick — and
// each process's names are distinct.
func TestProbeNamesOfAResumedSweep(t *testing.T) {
	start := time.Unix(1_800_000_000, 123)
	for _, c := range []struct {
		name     string
		resumeAt time.Time
		pid      int
	}{
		{"resumed later", start.Add(90 * time.Second), 4242},
		{"same instant, another pid", start, 4243},
	} {
		killed, resumed := newProbeNames(start, 4242), newProbeNames(c.resumeAt, c.pid)
		seen := map[string]string{}
		for i := 0; i < 50; i++ {
			for who, n := range map[string]*probeNames{"killed": killed, "resumed": resumed} {
				name := n.next()
				if prev, ok := seen[name]; ok {
					t.Fatalf("%s: %s's probe %d is named %q, as one of %s's", c.name, who, i+1, name, prev)
				}
				seen[name] = who
			}
		}
	}
}
