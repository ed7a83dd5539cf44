package probes

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// What shared a run's CPUs: two readings of a host's /proc, one when the
// load starts and one when it ends, give the CPU seconds the engine's
// process tree used, the host's busy and stolen time, and the busy time of
// the cores the load generator may run on. The readings come from one sh
// command line (CPUReadCommand) run on the host, this machine included, so
// an SSH host is read the same way as the local one.

// Runner runs a sh command line on a host (hosts.Host's Run).
type Runner interface {
	Run(ctx context.Context, cmd string) (stdout, stderr []byte, err error)
}

// cpuMarker starts the reading on stdout, after anything a chatty login
// shell prints.
const cpuMarker = "mbench-cpu-begin"

// CPUReadCommand prints, after a marker line, the clock ticks per second,
// /proc/uptime, /proc/stat's cpu lines and every process's /proc/<pid>/stat.
const CPUReadCommand = "echo " + cpuMarker + "; getconf CLK_TCK; cat /proc/uptime; grep '^cpu' /proc/stat; cat /proc/[0-9]*/stat 2>/dev/null; true"

// coreTimes are one /proc/stat cpu line's jiffies: busy (user, nice,
// system, irq, softirq), stolen by the hypervisor, and all of them.
type coreTimes struct{ busy, steal, total uint64 }

// CPUSnapshot is one reading of a host's CPU counters.
type CPUSnapshot struct {
	Tick   float64 // clock ticks per second
	Uptime float64 // seconds since boot
	All    coreTimes
	CPUs   map[int]coreTimes
	Procs  map[int]procStat
}

// ReadCPU reads a host's CPU counters with CPUReadCommand.
func ReadCPU(ctx context.Context, r Runner) (*CPUSnapshot, error) {
	out, _, err := r.Run(ctx, CPUReadCommand)
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	return parseCPUSnapshot(out)
}

// parseCPUSnapshot reads CPUReadCommand's output. A process line it
// cannot read (a name with a newline in it) is left out.
func parseCPUSnapshot(out []byte) (*CPUSnapshot, error) {
	i := bytes.Index(out, []byte(cpuMarker+"\n"))
	if i < 0 {
		return nil, fmt.Errorf("read /proc: no %q line in the output", cpuMarker)
	}
	lines := bytes.Split(out[i+len(cpuMarker)+1:], []byte{'\n'})
	if len(lines) < 3 {
		return nil, fmt.Errorf("read /proc: output ends after %d lines", len(lines))
	}
	s := &CPUSnapshot{CPUs: map[int]coreTimes{}, Procs: map[int]procStat{}}
	var err error
	if s.Tick, err = strconv.ParseFloat(string(bytes.TrimSpace(lines[0])), 64); err != nil || s.Tick <= 0 {
		return nil, fmt.Errorf("read /proc: clock ticks per second %q", lines[0])
	}
	up, _, _ := bytes.Cut(bytes.TrimSpace(lines[1]), []byte(" "))
	if s.Uptime, err = strconv.ParseFloat(string(up), 64); err != nil {
		return nil, fmt.Errorf("read /proc/uptime: %q: %w", lines[1], err)
	}
	sawAll := false
	for _, line := range lines[2:] {
		switch {
		case bytes.HasPrefix(line, []byte("cpu")):
			name, t, err := parseCoreLine(line)
			if err != nil {
				return nil, err
			}
			if name == "" {
				s.All, sawAll = t, true
			} else if n, err := strconv.Atoi(name); err == nil {
				s.CPUs[n] = t
			}
		case len(line) > 0 && line[0] >= '0' && line[0] <= '9':
			if pid, p, ok := parseProcLine(line); ok {
				s.Procs[pid] = p
			}
		}
	}
	if !sawAll {
		return nil, fmt.Errorf("read /proc/stat: no cpu line")
	}
	return s, nil
}

// parseCoreLine reads "cpu[N] user nice system idle iowait irq softirq
// steal ..." into the CPU's number ("" for the total) and its times.
func parseCoreLine(line []byte) (string, coreTimes, error) {
	f := bytes.Fields(line)
	if len(f) < 9 {
		return "", coreTimes{}, fmt.Errorf("read /proc/stat: short line %.60q", line)
	}
	var v [8]uint64
	for i := range v {
		x, err := strconv.ParseUint(string(f[1+i]), 10, 64)
		if err != nil {
			return "", coreTimes{}, fmt.Errorf("read /proc/stat: %s field %d: %w", f[0], i+1, err)
		}
		v[i] = x
	}
	t := coreTimes{busy: v[0] + v[1] + v[2] + v[5] + v[6], steal: v[7]}
	for _, x := range v {
		t.total += x
	}
	return string(f[0][3:]), t, nil
}

// parseProcLine reads one /proc/<pid>/stat line of a live process with
// its CPU times.
func parseProcLine(line []byte) (int, procStat, bool) {
	pidText, _, _ := bytes.Cut(line, []byte(" "))
	pid, err := strconv.Atoi(string(pidText))
	if err != nil {
		return 0, procStat{}, false
	}
	p, err := parseProcStat(line)
	if err != nil || !p.cpu || p.state == 'Z' || p.state == 'X' {
		return 0, procStat{}, false
	}
	return pid, p, true
}

// Tree lists, sorted, the processes of s in the groups pgids and every
// descendant of theirs by parent pid (one that left the group with setsid
// stays a descendant).
func (s *CPUSnapshot) Tree(pgids []int) []int {
	in := map[int]bool{}
	for pid, p := range s.Procs {
		if slices.Contains(pgids, p.pgrp) && p.pgrp > 1 {
			in[pid] = true
		}
	}
	for grew := len(in) > 0; grew; {
		grew = false
		for pid, p := range s.Procs {
			if !in[pid] && in[p.ppid] {
				in[pid], grew = true, true
			}
		}
	}
	return slices.Sorted(maps.Keys(in))
}

// used is the CPU seconds pids spent between a and b: for a process in
// both (the same start time), what it added; for one started after a,
// all of it.
func used(a, b *CPUSnapshot, pids []int) float64 {
	var ticks uint64
	for _, pid := range pids {
		pb := b.Procs[pid]
		if pa, ok := a.Procs[pid]; ok && pa.start == pb.start {
			if pb.ticks > pa.ticks {
				ticks += pb.ticks - pa.ticks
			}
		} else {
			ticks += pb.ticks
		}
	}
	return float64(ticks) / b.Tick
}

// EngineHost is what a host that runs engine processes gave them over a
// run: the CPU of their process trees (as a % of one core) and the host's
// busy and stolen CPU (% of all its cores). WithMbench says mbench runs on
// that host too (its own CPU is the run's client_cpu_pct).
type EngineHost struct {
	Host         string  `json:"host"`
	Procs        int     `json:"procs"`
	EngineCPUPct float64 `json:"engine_cpu_pct"`
	Cores        int     `json:"cores"`
	BusyPct      float64 `json:"busy_pct"`
	StealPct     float64 `json:"steal_pct"`
	WithMbench   bool    `json:"with_mbench,omitempty"`
}

// SummarizeEngineHost is host's EngineHost between a and b for the
// engine processes that lead the groups pgids. False when no time passed.
func SummarizeEngineHost(host string, a, b *CPUSnapshot, pgids []int, withMbench bool) (EngineHost, bool) {
	wall := b.Uptime - a.Uptime
	if !(wall > 0) {
		return EngineHost{}, false
	}
	tree := b.Tree(pgids)
	cores := len(b.CPUs)
	h := EngineHost{Host: host, Procs: len(tree), Cores: cores, EngineCPUPct: 100 * used(a, b, tree) / wall, WithMbench: withMbench}
	if cores > 0 {
		capacity := wall * float64(cores) * b.Tick
		h.BusyPct = 100 * float64(b.All.busy-min(a.All.busy, b.All.busy)) / capacity
		h.StealPct = 100 * float64(b.All.steal-min(a.All.steal, b.All.steal)) / capacity
	}
	return h, true
}

// BusyCoresPct is how busy the load generator's cores may be with other
// work (any process but mbench, and time stolen by the hypervisor), as a
// % of those cores over the run, before the run is marked as having shared
// busy cores: its timings then include waits for a CPU.
const BusyCoresPct = 50

// LoadGenCores is what else ran on the cores the load generator may use
// over a run: the CPUs, other work's busy time and the stolen time on
// them (% of those cores), and Shared when the two together reach
// BusyCoresPct.
type LoadGenCores struct {
	CPUs     string  `json:"cpus"`
	OtherPct float64 `json:"other_pct"`
	StealPct float64 `json:"steal_pct"`
	Shared   bool    `json:"shared_busy_cores"`
}

// SummarizeLoadGenCores is the LoadGenCores of cpus between a and b,
// leaving out self's own CPU; false when a CPU is missing or no time
// passed.
func SummarizeLoadGenCores(a, b *CPUSnapshot, cpus []int, self int) (LoadGenCores, bool) {
	var busy, steal, total uint64
	for _, c := range cpus {
		ta, ok1 := a.CPUs[c]
		tb, ok2 := b.CPUs[c]
		if !ok1 || !ok2 {
			return LoadGenCores{}, false
		}
		busy += tb.busy - min(ta.busy, tb.busy)
		steal += tb.steal - min(ta.steal, tb.steal)
		total += tb.total - min(ta.total, tb.total)
	}
	if len(cpus) == 0 || total == 0 {
		return LoadGenCores{}, false
	}
	ticks := float64(busy) - used(a, b, []int{self})*b.Tick
	l := LoadGenCores{CPUs: formatCPUs(cpus), OtherPct: max(0, 100*ticks/float64(total)), StealPct: 100 * float64(steal) / float64(total)}
	l.Shared = l.OtherPct+l.StealPct >= BusyCoresPct
	return l, true
}

// formatCPUs writes cpus as ranges: "0-3,6".
func formatCPUs(cpus []int) string {
	c := slices.Sorted(slices.Values(cpus))
	var b []byte
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(c[i]), 10)
		if j > i {
			b = append(append(b, '-'), strconv.Itoa(c[j])...)
		}
		i = j + 1
	}
	return string(b)
}

// Contention is what shared a run's CPUs (summary_A.json's contention):
// mbench's own scheduling delay, what else ran on the load generator's
// cores, and each host with engine processes.
type Contention struct {
	SchedDelay   *SchedDelay   `json:"sched_delay,omitempty"`
	LoadGenCores *LoadGenCores `json:"load_generator_cores,omitempty"`
	EngineHosts  []EngineHost  `json:"engine_hosts,omitempty"`
}

// SharedBusyCores says the load generator shared busy cores (see
// BusyCoresPct).
func (c *Contention) SharedBusyCores() bool {
	return c != nil && c.LoadGenCores != nil && c.LoadGenCores.Shared
}
