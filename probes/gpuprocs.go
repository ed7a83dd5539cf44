package probes

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPUProc is one process NVML lists on a GPU (compute or graphics), with
// what /proc on the sampling host says about it.
type GPUProc struct {
	Pid int `json:"pid"`
	// UsedMiB is the GPU memory NVML charges to the process (0 where NVML
	// does not report it, as under some virtualization).
	UsedMiB float64 `json:"used_mib"`
	// Name, Pgid and Sid come from /proc/<pid>/stat on the sampling host;
	// empty when the pid is not visible there (a process of another PID
	// namespace: NVML reports host pids to a container on older drivers).
	Name string `json:"name,omitempty"`
	Pgid int    `json:"pgid,omitempty"`
	Sid  int    `json:"sid,omitempty"`
	// Ancestors are its parent, grandparent, … up to (not including)
	// pid 1, so that a worker that left the engine's session (setsid)
	// is still known by its descent.
	Ancestors []int `json:"ancestors,omitempty"`
}

// Visible reports whether /proc on the sampling host knew the process.
func (p GPUProc) Visible() bool { return p.Sid != 0 || p.Pgid != 0 }

// String names the process as reports quote it: "pid 4242 (python3, 1754 MiB)".
func (p GPUProc) String() string {
	return fmt.Sprintf("pid %d (%s, %.0f MiB)", p.Pid, p.shownName(), p.UsedMiB)
}

// shownName is the process's name, or why it has none.
func (p GPUProc) shownName() string {
	if !p.Visible() {
		return "not visible from this PID namespace"
	}
	return p.Name
}

// Owner says which GPU processes belong to the engine being measured.
type Owner interface {
	Owns(host string, p GPUProc) bool
}

// EngineGroups maps a host (as GPUSample.Host names it) to the process
// groups of the engine's processes there. mbench starts every engine process
// as the leader of its own session and process group (pid = pgid = sid), so
// a GPU process is the engine's when its session or process group is one of
// them (vLLM's workers inherit both) or when it descends from one of their
// leaders (a worker that called setsid). The zero value owns nothing, which
// is right before the first launch: every GPU process then is foreign.
type EngineGroups map[string][]int

// Owns implements Owner. A process /proc cannot see is not owned.
func (e EngineGroups) Owns(host string, p GPUProc) bool {
	if !p.Visible() {
		return false
	}
	groups := e[host]
	return slices.Contains(groups, p.Sid) || slices.Contains(groups, p.Pgid) ||
		slices.ContainsFunc(p.Ancestors, func(a int) bool { return slices.Contains(groups, a) })
}

// SplitProcs separates a GPU's processes into the engine's and the others.
// A nil owner owns nothing.
func SplitProcs(o Owner, host string, procs []GPUProc) (own, foreign []GPUProc) {
	for _, p := range procs {
		if o != nil && o.Owns(host, p) {
			own = append(own, p)
		} else {
			foreign = append(foreign, p)
		}
	}
	return own, foreign
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned memory figure.
const notAvailable = ^uint64(0)

// gpuProcs lists the compute and graphics processes on a device (a process
// in both lists once) and looks each up in procRoot (normally /proc). A
// refused list is returned as an error only when both are refused.
func gpuProcs(dev nvml.Device, procRoot string) ([]GPUProc, error) {
	compute, r1 := dev.GetComputeRunningProcesses()
	graphics, r2 := dev.GetGraphicsRunningProcesses()
	if r1 != nvml.SUCCESS && r2 != nvml.SUCCESS {
		return nil, fmt.Errorf("processes: %s", returnName(r1))
	}
	var out []GPUProc
	seen := map[uint32]int{}
	for _, list := range [][]nvml.ProcessInfo{compute, graphics} {
		for _, pi := range list {
			mib := 0.0
			if pi.UsedGpuMemory != notAvailable {
				mib = float64(pi.UsedGpuMemory) / (1 << 20)
			}
			if i, ok := seen[pi.Pid]; ok {
				out[i].UsedMiB = max(out[i].UsedMiB, mib)
				continue
			}
			seen[pi.Pid] = len(out)
			p := GPUProc{Pid: int(pi.Pid), UsedMiB: mib}
			if st, err := readProcStat(procRoot, p.Pid); err == nil {
				p.Name, p.Pgid, p.Sid = st.comm, st.pgrp, st.session
				p.Ancestors = ancestors(procRoot, st.ppid)
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// maxAncestors bounds the walk up the process tree.
const maxAncestors = 16

// ancestors walks parent links from ppid up to (not including) pid 1.
func ancestors(procRoot string, ppid int) []int {
	var out []int
	for ppid > 1 && len(out) < maxAncestors {
		out = append(out, ppid)
		st, err := readProcStat(procRoot, ppid)
		if err != nil {
			break
		}
		ppid = st.ppid
	}
	return out
}

// procStat is what the probes read of /proc/<pid>/stat: the GPU probes
// its name and place, the CPU probes (cpushare.go) also its state, start
// time (ticks after boot) and its user+system time with that of its
// waited-for children, in ticks, which cpu says were read.
type procStat struct {
	comm                string
	ppid, pgrp, session int
	state               byte
	start, ticks        uint64
	cpu                 bool
}

func readProcStat(procRoot string, pid int) (procStat, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(b)
}

// parseProcStat reads comm, ppid, pgrp and session from /proc/<pid>/stat:
// "pid (comm) state ppid pgrp session ...". comm may hold spaces and
// parentheses, so it ends at the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("proc stat: no (comm)")
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 4 {
		return procStat{}, fmt.Errorf("proc stat: %d fields after comm, want ≥ 4", len(f))
	}
	var st procStat
	var errs [3]error
	st.ppid, errs[0] = strconv.Atoi(f[1])
	st.pgrp, errs[1] = strconv.Atoi(f[2])
	st.session, errs[2] = strconv.Atoi(f[3])
	if err := errors.Join(errs[:]...); err != nil {
		return procStat{}, fmt.Errorf("proc stat: bad ppid %q, pgrp %q or session %q", f[1], f[2], f[3])
	}
	st.comm, st.state = string(b[open+1:end]), f[0][0]
	if len(f) >= 20 { // fields 14-17: utime stime cutime cstime; 22: starttime
		st.cpu = true
		for _, i := range []int{14, 15, 16, 17, 22} {
			v, err := strconv.ParseUint(f[i-3], 10, 64)
			if err != nil {
				return procStat{}, fmt.Errorf("proc stat: field %d %q: %w", i, f[i-3], err)
			}
			if i == 22 {
				st.start = v
			} else {
				st.ticks += v
			}
		}
	}
	return st, nil
}
