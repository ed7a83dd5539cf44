package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mbench/mbench/internal/clock"
	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/shquote"
)

// instruments measure the machine around a sweep's runs: this machine's
// GPUs and host through NVML, remote hosts' and Slurm nodes' through
// `mbench probe`, and the gate that holds a run back until the GPUs are
// back at their baseline with no foreign process on them. Which GPU
// processes are foreign is decided against the launcher's running set.
type instruments struct {
	*sweepLog
	m       *matrices.Matrix
	fleet   *fleet
	hosts   hostInfo  // what the fleet knows of where each host's processes run
	engines *launcher // whose running set owns GPU processes
	marker  string    // the sweep id: probe processes' pidfiles carry it
	selfEnv []string  // environment of processes started from the mbench binary (tests)

	gpu        *gpuProbe   // nil before open
	probeFiles *probeNames // names the remote probes' files (the field "probes" would read as the package)
}

// probeNames names the files of the remote probes one mbench process
// starts: probe.<tag>.<n>, n counting this process's probes, the tag
// this process's own (its start time and pid). A resumed sweep's probe
// must not share a file with a probe the killed process left starting: a
// Slurm step that outlives it truncates its output when it finally starts.
type probeNames struct {
	tag string
	n   int
}

// newProbeNames returns the names of the process pid started at start.
func newProbeNames(start time.Time, pid int) *probeNames {
	return &probeNames{tag: strconv.FormatInt(start.UnixNano(), 36) + "-" + strconv.Itoa(pid)}
}

// next is the next probe's file name stem.
func (p *probeNames) next() string {
	p.n++
	return fmt.Sprintf("probe.%s.%d", p.tag, p.n)
}

// hostInfo is what the instruments need to know of the hosts: whether a
// host's engines run on this machine, the mbench binary there, the host
// name a process's GPU samples carry, and readers of the Slurm nodes' GPUs
// for the gate.
type hostInfo interface {
	onThisMachine(host string) bool
	selfOn(host string) (string, bool)
	sampleHost(p *engineProc) string
	slurmGPUReads(ctx context.Context) (reads []func(context.Context) ([]probes.GPUSample, error), gated map[string]bool)
}

// gpuProbe holds the sweep's NVML handle and gate. A machine without a GPU
// gets nil, said once.
type gpuProbe struct {
	sampler func() *probes.Sampler
	gate    *probes.Gate // Baseline: the idle GPUs before the first launch
	close   func()
	idleRec *probes.BaselineRecord

	// loaded is the gate baseline while an engine set runs: the idle
	// temperatures, and the memory the engine holds once ready (a loaded
	// vLLM never gets back to idle memory). loadedFor is the set it is for.
	loaded    []probes.GPUSample
	loadedRec *probes.BaselineRecord
	loadedFor *engineSet
	// beforeLaunch is the idle gate waited before the running engine set
	// was launched, reported with the run that launched it.
	beforeLaunch *probes.GateResult
	// localGate says the gate reads this machine's GPUs; gated names the
	// slurm hosts whose nodes it reads through job steps.
	localGate bool
	gated     map[string]bool
}

// runningEngine owns the GPU processes of the sweep's running engine set.
type runningEngine struct{ i *instruments }

func (r runningEngine) Owns(host string, p probes.GPUProc) bool {
	return r.i.engineGroups(r.i.engines.cur).Owns(host, p)
}

// engineGroups maps each host of es, named as its GPU samples name it
// ("local" for this machine), to the process groups of es's processes
// there. Every process is started as its own group and session leader.
func (s *instruments) engineGroups(es *engineSet) probes.EngineGroups {
	out := probes.EngineGroups{}
	if es == nil {
		return out
	}
	for _, p := range es.all() {
		host := s.hosts.sampleHost(p)
		if pid := nodePid(p.proc); pid > 0 {
			out[host] = append(out[host], pid)
		}
	}
	return out
}

// open opens NVML on this machine. When it fails, GPU samples are off for
// the sweep and the summaries say "gpu: unavailable". The gate's idle
// baseline is taken once no foreign process is on the GPUs (up to the gate
// timeout).
func (s *instruments) open(ctx context.Context) {
	lib, shutdown, err := probes.OpenNVML()
	if err != nil {
		s.logf("probe: NVML unavailable (%v): GPU samples off, host samples continue", err)
		lib = nil
	}
	interval := s.m.Probe.Interval
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	g := &gpuProbe{close: func() {}}
	if shutdown != nil {
		g.close = shutdown
	}
	g.sampler = func() *probes.Sampler { return probes.NewSampler(lib, "local", interval, nil) }
	var reads []func(context.Context) ([]probes.GPUSample, error)
	if s.m.Gate.Enabled {
		if lib != nil {
			reader := probes.NewSampler(lib, "local", interval, nil)
			reads = append(reads, func(context.Context) ([]probes.GPUSample, error) { return reader.SampleGPUs() })
			g.localGate = true
		}
		var sr []func(context.Context) ([]probes.GPUSample, error)
		sr, g.gated = s.hosts.slurmGPUReads(ctx)
		reads = append(reads, sr...)
	}
	if len(reads) > 0 {
		g.gate = &probes.Gate{
			Read: func(ctx context.Context) ([]probes.GPUSample, error) {
				var all []probes.GPUSample
				for _, r := range reads {
					samples, err := r(ctx)
					if err != nil {
						return nil, err
					}
					all = append(all, samples...)
				}
				return all, nil
			},
			TempBandC:       s.m.Gate.TempBandC,
			MemToleranceMiB: float64(s.m.Gate.MemToleranceMiB),
			Timeout:         s.m.Gate.Timeout,
			Poll:            time.Second,
			Owner:           runningEngine{s},
		}
		s.prog.setPhase("gate")
		rec, err := g.gate.MeasureBaseline(ctx)
		switch {
		case err != nil:
			s.logf("gate: baseline not measured (%v): gate off", err)
			g.gate = nil
		case rec.Method != probes.BaselineClean:
			s.logf("warning: gate: foreign processes stayed on the GPUs for %s; idle baseline taken with their memory subtracted: %s",
				s.m.Gate.Timeout, strings.Join(rec.Foreign, "; "))
		}
		g.idleRec = &rec
	}
	s.gpu = g
}

// close closes NVML.
func (s *instruments) close() {
	if s.gpu != nil {
		s.gpu.close()
	}
}

// startProbes samples into the run directory's gpu.jsonl and host.jsonl
// until stop is called: this machine's host (where the load generator runs)
// and, when an engine of es is local, its GPUs; and on every remote host of
// es a `mbench probe` process whose files are fetched and appended when it
// stops. done is closed when everything is written.
func (s *instruments) startProbes(ctx context.Context, dir string, es *engineSet) (stop func(), done <-chan struct{}) {
	ch := make(chan struct{})
	if s.gpu == nil {
		close(ch)
		return func() {}, ch
	}
	pctx, cancel := context.WithCancel(ctx)
	gf, err1 := os.Create(filepath.Join(dir, "gpu.jsonl"))
	hf, err2 := os.Create(filepath.Join(dir, "host.jsonl"))
	if err := errors.Join(err1, err2); err != nil {
		s.logf("warning: probes off for this run: %v", err)
		cancel()
		close(ch)
		return func() {}, ch
	}
	remote := s.startRemoteProbes(ctx, es)
	var gw io.Writer
	if s.runIsLocal(es) {
		gw = gf
	}
	smp := s.gpu.sampler()
	go func() {
		defer close(ch)
		if err := smp.Run(pctx, gw, hf); err != nil && pctx.Err() == nil {
			s.logf("warning: probe: %v", err)
		}
		if smp.EventsNote != "" {
			s.noteOnce("gpu-events", "probe: XID/ECC events: %s", smp.EventsNote)
		}
		s.finishRemoteProbes(context.WithoutCancel(ctx), remote, gf, hf)
		gf.Close()
		hf.Close()
	}()
	return cancel, ch
}

// runIsLocal reports whether a process of es is on this machine (or no
// engine set is known): only then are local GPUs sampled.
func (s *instruments) runIsLocal(es *engineSet) bool {
	if es == nil || len(es.all()) == 0 {
		return true
	}
	return slices.ContainsFunc(es.all(), func(p *engineProc) bool { return s.hosts.onThisMachine(p.hostName) })
}

// runIsGated reports whether the gate reads the GPUs of a process of es (or
// no engine set is known).
func (s *instruments) runIsGated(es *engineSet) bool {
	if es == nil || len(es.all()) == 0 {
		return true
	}
	return slices.ContainsFunc(es.all(), func(p *engineProc) bool {
		return (s.gpu.localGate && s.hosts.onThisMachine(p.hostName)) || s.gpu.gated[p.hostName]
	})
}

// remoteProbe is a `mbench probe` process on a remote host for one run.
type remoteProbe struct {
	hostName    string
	h           hosts.Host
	proc        hosts.Process
	gpuF, hostF string
	logF        string
}

// startRemoteProbes starts `mbench probe` on every remote host of es; a
// host without an mbench binary is skipped (said once).
func (s *instruments) startRemoteProbes(ctx context.Context, es *engineSet) []*remoteProbe {
	if es == nil {
		return nil
	}
	interval := s.m.Probe.Interval
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	seen := map[string]bool{}
	var out []*remoteProbe
	for _, p := range es.all() {
		name := p.hostName
		label := s.hosts.sampleHost(p)
		if seen[label] || s.hosts.onThisMachine(name) {
			continue
		}
		seen[label] = true
		self, ok := s.hosts.selfOn(name)
		if !ok {
			s.noteOnce("probe-"+name, "host %s: no mbench binary there (set hosts.%s.mbench_path): no GPU or host samples from it", name, name)
			continue
		}
		base := s.fleet.path(name, "probes", s.probeFiles.next())
		rp := &remoteProbe{hostName: name, h: p.host, gpuF: base + ".gpu.jsonl", hostF: base + ".host.jsonl", logF: base + ".log"}
		q := shquote.Quote
		cmd := fmt.Sprintf("%s probe --interval %s --host %s --gpu-out %s --host-out %s",
			shquote.Path(self), interval, q(label), q(rp.gpuF), q(rp.hostF))
		pname := "probe-" + name
		if label != name {
			pname = fmt.Sprintf("probe-%s-%d", name, p.node)
		}
		proc, err := startProbeOn(ctx, p.host, hosts.ProcSpec{
			Name: pname, Node: p.node, Command: cmd, Env: toHostEnv(nil, s.selfEnv),
			LogPath: rp.logF, StateDir: s.fleet.path(name, "pids"), Marker: s.marker,
			Tether: true, TetherGrace: time.Second,
		})
		if err != nil {
			s.logf("warning: host %s: start probe: %v", name, err)
			continue
		}
		rp.proc = proc
		out = append(out, rp)
	}
	return out
}

// finishRemoteProbes stops each remote probe and appends its samples to the
// run's files. The probe's own notes (NVML unavailable) are said once.
func (s *instruments) finishRemoteProbes(ctx context.Context, rps []*remoteProbe, gf, hf io.Writer) {
	for _, rp := range rps {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		s.waitFirstSample(cctx, rp)
		if err := rp.proc.Stop(cctx, 2*time.Second); err != nil {
			s.logf("warning: host %s: stop probe: %v", rp.hostName, err)
		}
		for _, f := range []struct {
			path string
			w    io.Writer
		}{{rp.gpuF, gf}, {rp.hostF, hf}} {
			if _, err := rp.h.Get(cctx, f.path, 0, f.w); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.logf("warning: host %s: fetch probe samples %s: %v", rp.hostName, f.path, err)
			}
		}
		if note := strings.TrimSpace(rp.proc.LogTail(cctx, 5)); strings.Contains(note, "NVML unavailable") {
			s.noteOnce("nvml-"+rp.hostName, "host %s: %s", rp.hostName, firstLine(note))
		}
		cancel()
	}
}

// waitFirstSample waits, up to 5 s, until a remote probe has written its
// first host sample: a probe started just before a short run (a Slurm step
// is scheduled, then its task starts) may not have written one yet, and a
// stop then would leave the run without any.
func (s *instruments) waitFirstSample(ctx context.Context, rp *remoteProbe) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	check := "test -s " + shquote.Quote(rp.hostF)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		if _, _, err := rp.h.Run(ctx, check); err == nil {
			return
		}
		select {
		case <-rp.proc.Done(): // an exited probe writes nothing more
			return
		default:
		}
		if clock.Sleep(ctx, wait) != nil {
			s.logf("warning: host %s: the probe wrote no sample within 5 s", rp.hostName)
			return
		}
	}
}

// gpuSummary summarizes the run's gpu.jsonl: processes of es, the run's
// engine set, are its own, any other makes the run contended.
func (s *instruments) gpuSummary(dir string, es *engineSet) *probes.GPUSummary {
	f, err := os.Open(filepath.Join(dir, "gpu.jsonl"))
	if err != nil {
		return &probes.GPUSummary{Available: false, Reason: "no GPU samples (NVML unavailable)"}
	}
	defer f.Close()
	samples, err := probes.ReadGPUSamples(f)
	if err != nil {
		return &probes.GPUSummary{Available: false, Reason: fmt.Sprintf("gpu.jsonl unreadable: %v", err)}
	}
	g := probes.SummarizeGPUWith(samples, probes.GPUSummaryOptions{
		Owner: s.engineGroups(es), ThrottleMaxFraction: s.m.Probe.ThrottleMaxFraction,
	})
	return &g
}

// gate waits, before a run, until the GPUs' temperature is back within the
// band of the sweep's idle baseline, their memory back at the level the
// running engine held when it was ready, and no foreign process is on them:
// a warm GPU after a heavy run is the cold/warm ordering effect
// (docs/design.md), and a foreign process shares the GPU. The record goes
// into the run's summary; es is the run's engine set, run names the run in
// messages.
func (s *instruments) gate(ctx context.Context, es *engineSet, run string) *probes.GateRecord {
	if s.gpu == nil || s.gpu.gate == nil {
		return &probes.GateRecord{Note: "gpu unavailable or gate disabled"}
	}
	if !s.runIsGated(es) {
		return &probes.GateRecord{Note: "the engines run on hosts whose GPUs the gate does not read: it covers local GPUs and the nodes of slurm hosts"}
	}
	s.prog.setPhase("gate")
	g := s.gpu
	rec := &probes.GateRecord{Enabled: true, IdleBaseline: g.idleRec, IdleBeforeLaunch: g.beforeLaunch}
	g.beforeLaunch = nil
	cur := es
	if cur != nil && g.loadedFor != cur {
		base, brec, err := g.gate.MeasureLoaded(ctx)
		switch {
		case ctx.Err() != nil:
			rec.Note = ctx.Err().Error()
			return rec
		case err != nil:
			s.logf("warning: %v: the gate compares memory with the idle baseline", err)
		default:
			g.loaded, g.loadedRec, g.loadedFor = base, &brec, cur
		}
	}
	gt := *g.gate
	if cur != nil && g.loadedFor == cur {
		gt.Baseline, gt.Kind, rec.EngineLoadedBaseline = g.loaded, probes.BaselineEngineLoaded, g.loadedRec
	}
	r, err := gt.Wait(ctx)
	if err != nil {
		rec.Note = err.Error()
		return rec
	}
	if r.TimedOut {
		s.logf("warning: gate timed out after %s before run %s: %s", gt.Timeout, run, r.Reason)
	}
	rec.BeforeLoad = &r
	return rec
}

// waitGateAfterTeardown waits, after an engine set was stopped, until the
// GPUs are back at the sweep's idle baseline (memory freed, temperature in
// band, no foreign process), so that the next launch starts from the same
// state; the next run records it as idle_before_launch.
func (s *instruments) waitGateAfterTeardown(ctx context.Context) {
	if s.gpu == nil || s.gpu.gate == nil {
		return
	}
	s.prog.setPhase("gate")
	s.gpu.loaded, s.gpu.loadedRec, s.gpu.loadedFor = nil, nil, nil
	if r, err := s.gpu.gate.Wait(ctx); err == nil {
		s.gpu.beforeLaunch = &r
		if r.TimedOut {
			s.logf("warning: GPUs not back at idle %s after teardown: %s", s.gpu.gate.Timeout, r.Reason)
		}
	}
}

// instanceURLs are the base URLs of an engine set's instances, whose
// /metrics are scraped (a router has none of its own).
func instanceURLs(es *engineSet) []string {
	urls := make([]string, len(es.procs))
	for i, p := range es.procs {
		urls[i] = p.url
	}
	return urls
}

// checkEngineVersion records the engine's version in the fingerprint, and
// refuses to mix results with another version unless forced.
func (s *runner) checkEngineVersion(ctx context.Context, es *engineSet) error {
	if len(es.procs) == 0 {
		return nil
	}
	v := s.profile().VersionOf(ctx, nil, es.procs[0].url)
	if v == "" {
		return nil
	}
	return s.store.recordEngineVersion(v, s.force)
}

var errFingerprint = errors.New("environment fingerprint changed")
