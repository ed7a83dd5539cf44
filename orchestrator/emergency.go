package orchestrator

import (
	"context"
	"sync"
	"time"

	"github.com/mbench/mbench/orchestrator/hosts"
)

// live is every sweep of this process with engines up, for EmergencyStop:
// for each, where its engines' pidfiles are on each host it uses.
var live struct {
	sync.Mutex
	sweeps map[*sweep][]pidDir
}

// pidDir is a host's pidfile directory of one sweep, with the sweep's marker.
type pidDir struct {
	host   hosts.Host
	dir    string
	marker string
}

// register records (on) or forgets the sweep's pidfile directories. It runs
// after prepareHosts has connected every host the sweep uses, so the list is
// fixed from then on and EmergencyStop needs nothing else of the sweep.
func (s *sweep) register(on bool) {
	var dirs []pidDir
	if on {
		for _, name := range s.m.HostOrder {
			if h, ok := s.fleet.connected(name); ok {
				dirs = append(dirs, pidDir{host: h, dir: s.fleet.path(name, "pids"), marker: s.state.SweepID})
			}
		}
	}
	live.Lock()
	defer live.Unlock()
	if live.sweeps == nil {
		live.sweeps = map[*sweep][]pidDir{}
	}
	if on {
		live.sweeps[s] = dirs
	} else {
		delete(live.sweeps, s)
	}
}

// EmergencyStop kills every engine process of every running sweep at once
// (SIGKILL to the process groups named by the sweep's pidfiles, no grace),
// for a second Ctrl-C. It works from the pidfiles, not from the sweep's
// in-memory state, so it is safe while the sweep goroutine is still running
// and it also catches an engine whose launch was under way. Remote engines
// also die with their SSH tether when this process exits.
func EmergencyStop() {
	live.Lock()
	var dirs []pidDir
	for _, ds := range live.sweeps {
		dirs = append(dirs, ds...)
	}
	live.Unlock()
	// First the launches under way: an engine that has not yet recorded
	// itself dies with its launcher; one that has is in its pidfile.
	hosts.AbortStarts()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, d := range dirs {
		wg.Go(func() { _, _ = hosts.StopLeftovers(ctx, d.host, d.dir, d.marker, 0) })
	}
	wg.Wait()
}
