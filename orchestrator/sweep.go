package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/shquote"
)

// Options configure a sweep.
type Options struct {
	// Out is the results directory. Empty means results/<name>-<UTC timestamp>.
	Out string
	// Self is the path of the mbench binary, used to start the simulated
	// engine ({{.Self}} in the sim command template).
	Self string
	// SelfEnv is extra environment for processes started from Self (tests
	// run the test binary as mbench this way).
	SelfEnv []string
	// DryRun prints the commands the sweep would run on each host, and runs
	// nothing.
	DryRun bool
	// Force allows mixing results from a changed environment fingerprint.
	Force bool
	// Quiet silences progress output.
	Quiet bool
	// Version is the mbench version recorded in the fingerprint.
	Version string
	// FailLimit is the number of consecutive failed runs after which a cell
	// is marked failed and skipped (default 3).
	FailLimit int
	// ResumeHint is the command line printed when the sweep is interrupted.
	ResumeHint string
	// MatrixOverride is the matrix file resume reads instead of the one the
	// sweep recorded (moved, or holding secrets the directory's copy lacks);
	// it must resolve to the recorded matrix.
	MatrixOverride string
	// SlurmJob is the Slurm job mbench runs inside (SLURM_JOB_ID of a batch
	// job), which a slurm host without an address then uses ("" = none).
	SlurmJob string
	Stdout   io.Writer
	Stderr   io.Writer

	// measurer, set by tests, measures every run in place of the sweep's
	// engines, gate, probes and load.
	measurer measurer
}

// Outcome is what a finished (or stopped) sweep reports.
type Outcome struct {
	Dir        string
	Report     string
	StopReason string
	// Verdicts counts the sweep's runs by verdict (Total is the run count).
	Verdicts results.VerdictCounts
	// Unusable lists the cells with no usable run, each with why
	// ("noop-r2 (noop_connector rate=2 4096x256): 3 saturated").
	Unusable []string
	Removed  []CellRecord
}

// ErrNoResult is wrapped by the error of a sweep that finished with cells
// that have no usable run: the exports are written, but they are not the
// results the matrix asked for.
var ErrNoResult = errors.New("cells without a usable run")

// ErrInterrupted is returned when the sweep was stopped by the user; the
// error text carries the exact resume command.
var ErrInterrupted = errors.New("sweep interrupted")

// Sweep is one sweep in progress.
type Sweep struct {
	opts  Options
	m     *matrices.Matrix
	cells map[string]matrices.Cell
	// store is the results directory: sweep.json, the journal, the ledger.
	*store
	// sweepLog is where the sweep says what it does (mbench.log, the
	// terminal) and its progress display.
	*sweepLog
	fleet    *fleet
	engines  *launcher
	instr    *instruments
	runner   *runner
	measurer measurer // the runner outside tests
	// allocationsEnded: a block ended the allocations of per-block slurm
	// hosts (slurm_block.go); the next block renews them.
	allocationsEnded bool
}

func newSweep(m *matrices.Matrix, dir string, opts Options) *Sweep {
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	if opts.FailLimit <= 0 {
		opts.FailLimit = 3
	}
	s := &Sweep{opts: opts, m: m, cells: map[string]matrices.Cell{}, fleet: newFleet(m, dir, opts.Stderr),
		store: newStore(dir, opts.FailLimit), sweepLog: newSweepLog(m.Redact, dir, opts.Stderr, opts.Quiet)}
	s.fleet.slurmJob = opts.SlurmJob
	s.engines = &launcher{sweepLog: s.sweepLog, m: m, fleet: s.fleet, selfEnv: opts.SelfEnv}
	s.instr = &instruments{sweepLog: s.sweepLog, m: m, fleet: s.fleet, hosts: s, engines: s.engines, selfEnv: opts.SelfEnv}
	s.runner = &runner{sweepLog: s.sweepLog, m: m, store: s.store, engines: s.engines, instr: s.instr, runtime: s.runtime, force: opts.Force}
	s.measurer = s.runner
	if opts.measurer != nil {
		s.measurer = opts.measurer
	}
	for _, c := range m.Cells() {
		s.cells[c.ID] = c
	}
	return s
}

// DefaultOut is the default results directory of a matrix.
func DefaultOut(name string, now time.Time) string {
	return filepath.Join("results", name+"-"+now.UTC().Format("20060102T150405Z"))
}

func sweepID(name, absDir string) string {
	sum := sha256.Sum256([]byte(absDir))
	return name + "-" + hex.EncodeToString(sum[:6])
}

func (s *Sweep) isSim() bool { return s.m.Engine.Kind == matrices.EngineSim }

// host returns the connection to a host of the matrix, dialling on first use.
func (s *Sweep) host(ctx context.Context, name string) (hosts.Host, error) {
	return s.fleet.host(ctx, name)
}

// hostPath is a path under this sweep's state directory on a host (fleet.path).
func (s *Sweep) hostPath(hostName string, parts ...string) string {
	return s.fleet.path(hostName, parts...)
}

// runtime gives the matrices package what it needs to render commands.
func (s *Sweep) runtime() matrices.Runtime {
	return matrices.Runtime{
		Self: func(h string) string {
			if p, ok := s.selfOn(h); ok {
				return p
			}
			return s.opts.Self
		},
		StepLog: func(h string, i int) string { return s.hostPath(h, "steps", fmt.Sprintf("engine_step.%d.jsonl", i)) },
		Bind:    s.bind(),
		Node:    s.nodeOf,
	}
}

// prepareHosts connects to every host the sweep uses, uploads mbench where
// the simulated engine runs remotely, and stops engines a crashed earlier
// run of this sweep left behind.
func (s *Sweep) prepareHosts(ctx context.Context) error {
	for _, name := range s.m.HostOrder {
		if !s.hostUsed(name) {
			continue
		}
		h, err := s.host(ctx, name)
		if err != nil {
			return err
		}
		if _, _, err := h.Run(ctx, "mkdir -p "+shquote.Quote(s.hostPath(name, "steps"))+" "+shquote.Quote(s.hostPath(name, "logs"))); err != nil {
			return fmt.Errorf("host %s: create the sweep's state directory: %w", name, err)
		}
		left, err := hosts.StopLeftovers(ctx, h, s.hostPath(name, "pids"), s.state.SweepID, 5*time.Second)
		if err != nil {
			return fmt.Errorf("host %s: stop engines left by an earlier run: %w", name, err)
		}
		for _, l := range left {
			s.logf("host %s: stopped leftover engine from an earlier run: %+v", name, l)
		}
		if !isLocal(s.m.Hosts[name].Address) {
			if err := s.uploadSelf(ctx, name, h); err != nil {
				if s.isSim() {
					return err
				}
				s.logf("host %s: %v: remote probes and {{.Self}} commands are off on this host", name, err)
			}
		}
		if s.m.Engine.Kind == matrices.EngineVLLM && s.m.Engine.Instrument {
			if err := s.installPlugin(ctx, name, h); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Sweep) hostUsed(name string) bool {
	for _, c := range s.m.ConfigOrder {
		l, err := s.m.Launch(c, s.runtime())
		if err != nil {
			continue
		}
		for _, in := range l.Instances {
			if in.Host == name {
				return true
			}
		}
		if l.Router != nil && l.Router.Host == name {
			return true
		}
	}
	return false
}

// uploadSelf makes this mbench binary available on a remote host, for the
// simulated engine, the router subcommand and remote probes: hosts.X.mbench_path
// when set, else a copy in the sweep's state directory, uploaded unless the
// copy there already has the same SHA-256 (a resumed sweep). The host must
// run the same OS and architecture as this binary.
func (s *Sweep) uploadSelf(ctx context.Context, name string, h hosts.Host) error {
	hc := s.m.Hosts[name]
	if hc.MbenchPath != "" {
		s.fleet.selfPath[name] = hc.MbenchPath
		return nil
	}
	if s.opts.Self == "" {
		return fmt.Errorf("host %s: no mbench binary to upload (set hosts.%s.mbench_path)", name, name)
	}
	out, _, err := h.Run(ctx, "uname -sm")
	if err != nil {
		return fmt.Errorf("host %s: uname: %w", name, err)
	}
	if want := unameOf(runtime.GOOS, runtime.GOARCH); lastLine(out) != want {
		return fmt.Errorf("host %s is %q but this mbench is built for %q; build mbench for the host and set hosts.%s.mbench_path",
			name, lastLine(out), want, name)
	}
	f, err := os.Open(s.opts.Self)
	if err != nil {
		return fmt.Errorf("open mbench binary %s for upload: %w", s.opts.Self, err)
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return fmt.Errorf("read mbench binary %s: %w", s.opts.Self, err)
	}
	digest := hex.EncodeToString(sum.Sum(nil))
	dst := s.hostPath(name, "bin", "mbench")
	q := shquote.Quote(dst)
	if out, _, err := h.Run(ctx, "[ -x "+q+" ] && sha256sum -- "+q+" 2>/dev/null"); err == nil && strings.HasPrefix(lastLine(out), digest) {
		s.fleet.selfPath[name] = dst
		return nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	s.logf("host %s: uploading mbench to %s", name, dst)
	if err := h.Put(ctx, f, dst, 0o755); err != nil {
		return fmt.Errorf("host %s: upload mbench to %s: %w", name, dst, err)
	}
	s.fleet.selfPath[name] = dst
	return nil
}

// unameOf is `uname -sm` of a machine that runs binaries for goos/goarch.
func unameOf(goos, goarch string) string {
	sys := map[string]string{"linux": "Linux", "darwin": "Darwin", "freebsd": "FreeBSD"}[goos]
	if sys == "" {
		sys = goos
	}
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686"}[goarch]
	if arch == "" {
		arch = goarch
	}
	if goos == "darwin" && goarch == "arm64" {
		arch = "arm64"
	}
	return sys + " " + arch
}

// lastLine is the last non-empty line of a command's output, trimmed.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// closeAll tears down the running engines and closes every host connection.
func (s *Sweep) closeAll(ctx context.Context) error {
	err := s.engines.stop(ctx)
	s.fleet.close()
	s.sweepLog.close()
	return err
}
