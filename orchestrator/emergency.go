package orchestrator

import (
	"context"
	"sync"
	"time"
)

// live is every sweep of this process with engines up, for EmergencyStop.
var live struct {
	sync.Mutex
	sweeps map[*Sweep]bool
}

func (s *Sweep) register(on bool) {
	live.Lock()
	defer live.Unlock()
	if live.sweeps == nil {
		live.sweeps = map[*Sweep]bool{}
	}
	if on {
		live.sweeps[s] = true
	} else {
		delete(live.sweeps, s)
	}
}

// EmergencyStop kills every engine process of every running sweep at once
// (SIGKILL to the process groups, no grace), for a second Ctrl-C. Remote
// engines also die with their SSH tether when this process exits.
func EmergencyStop() {
	live.Lock()
	defer live.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for s := range live.sweeps {
		if es := s.cur; es != nil {
			for _, p := range es.all() {
				p.proc.Stop(ctx, 0)
			}
		}
	}
}
