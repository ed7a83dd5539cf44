package probes

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// cpuTimes are the aggregate CPU jiffies of /proc/stat's "cpu" line.
//
// gopsutil/v4/cpu would do this, but its dependency
// github.com/tklauser/go-sysconf is not in this module's go.sum, so the
// host sampler reads /proc/stat itself (Linux; elsewhere cpu_pct stays 0).
type cpuTimes struct{ total, idle float64 }

var procStat = "/proc/stat"

func readCPUTimes() (cpuTimes, error) {
	b, err := os.ReadFile(procStat)
	if err != nil {
		if os.IsNotExist(err) {
			return cpuTimes{}, nil
		}
		return cpuTimes{}, fmt.Errorf("host cpu times: %w", err)
	}
	return parseCPUStat(b)
}

// parseCPUStat reads the first line "cpu user nice system idle iowait irq
// softirq steal guest guest_nice". Guest time is already counted in user
// and nice, so it is left out of the total.
func parseCPUStat(b []byte) (cpuTimes, error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return cpuTimes{}, fmt.Errorf("%s: unexpected first line %.60q", procStat, line)
	}
	var t cpuTimes
	for i, x := range f[1:] {
		if i >= 8 { // guest, guest_nice
			break
		}
		v, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("%s: field %d: %w", procStat, i+1, err)
		}
		t.total += v
		if i == 3 || i == 4 { // idle, iowait
			t.idle += v
		}
	}
	return t, nil
}

// busyPct is the share of non-idle CPU time between two readings, in %.
func busyPct(a, b cpuTimes) float64 {
	dt := b.total - a.total
	if dt <= 0 {
		return 0
	}
	return min(100, max(0, 100*(dt-(b.idle-a.idle))/dt))
}
