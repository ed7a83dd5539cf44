package openloop

import (
	"os"
	"sync"

	"github.com/shirou/gopsutil/v4/process"
)

var (
	selfOnce sync.Once
	self     *process.Process
	selfErr  error
)

// cpuSeconds returns the user+system CPU time of this process so far, from
// gopsutil (the client CPU that every run reports to grade itself).
func cpuSeconds() (float64, error) {
	selfOnce.Do(func() { self, selfErr = process.NewProcess(int32(os.Getpid())) })
	if selfErr != nil {
		return 0, selfErr
	}
	t, err := self.Times()
	if err != nil {
		return 0, err
	}
	return t.User + t.System, nil
}
