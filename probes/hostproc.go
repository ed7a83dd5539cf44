package probes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// The host sampler reads /proc directly on Linux: at 10 Hz, gopsutil's
// mem.VirtualMemory (173 allocations a call) and re-opening three files per
// round cost more than the whole GPU round. Each file stays open and is
// re-read with pread at offset 0, which regenerates /proc content. Where
// /proc is missing, CPU, memory and load come from gopsutil.

// procFile is a /proc file kept open and re-read whole.
type procFile struct {
	path string
	f    *os.File
	buf  []byte
}

func (p *procFile) read() ([]byte, error) {
	if p.f == nil {
		f, err := os.Open(p.path)
		if err != nil {
			return nil, err
		}
		p.f, p.buf = f, make([]byte, 8192)
	}
	for {
		n, err := p.f.ReadAt(p.buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: %w", p.path, err)
		}
		if n < len(p.buf) {
			return p.buf[:n], nil
		}
		p.buf = make([]byte, 2*len(p.buf)) // it did not fit: read again
	}
}

func (p *procFile) close() {
	if p.f != nil {
		p.f.Close()
		p.f = nil
	}
}

// cpuTimes are the aggregate CPU jiffies of /proc/stat's "cpu" line.
type cpuTimes struct{ total, idle float64 }

// parseCPUStat reads the first line "cpu user nice system idle iowait irq
// softirq steal guest guest_nice". Guest time is already counted in user
// and nice, so it is left out of the total.
func parseCPUStat(b []byte) (cpuTimes, error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: unexpected first line %.60q", line)
	}
	var t cpuTimes
	for i, x := range f[1:] {
		if i >= 8 { // guest, guest_nice
			break
		}
		v, err := strconv.ParseUint(string(x), 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: field %d: %w", i+1, err)
		}
		t.total += float64(v)
		if i == 3 || i == 4 { // idle, iowait
			t.idle += float64(v)
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

// parseMeminfo returns MemTotal and MemAvailable in KiB (used = total −
// available, as gopsutil defines it).
func parseMeminfo(b []byte) (total, avail uint64, err error) {
	var haveT, haveA bool
	for len(b) > 0 && !(haveT && haveA) {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		key, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		var dst *uint64
		switch string(key) {
		case "MemTotal":
			dst, haveT = &total, true
		case "MemAvailable":
			dst, haveA = &avail, true
		default:
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return 0, 0, fmt.Errorf("/proc/meminfo: %s without a value", key)
		}
		if *dst, err = strconv.ParseUint(string(f[0]), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/meminfo: %s: %w", key, err)
		}
	}
	if !haveT || !haveA {
		return 0, 0, errors.New("/proc/meminfo: no MemTotal or MemAvailable")
	}
	return total, avail, nil
}

// parseLoadavg returns the 1-minute load average.
func parseLoadavg(b []byte) (float64, error) {
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0, errors.New("/proc/loadavg: empty")
	}
	v, err := strconv.ParseFloat(string(f[0]), 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/loadavg: %w", err)
	}
	return v, nil
}
