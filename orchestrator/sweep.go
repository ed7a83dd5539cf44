package orchestrator

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
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
	// KeepGoing goes on with the other configs when a config's engine fails
	// before it is ready twice with the same cause (it is marked failed);
	// without it the sweep stops there.
	KeepGoing bool
	// ResumeHint is the command line printed when the sweep is interrupted.
	ResumeHint string
	// MatrixOverride is the matrix file resume reads instead of the one the
	// sweep recorded (moved, or holding secrets the directory's copy lacks);
	// it must resolve to the recorded matrix.
	MatrixOverride string
	// SlurmJob is the Slurm job mbench runs inside (SLURM_JOB_ID of a batch
	// job), which a slurm host without an address then uses ("" = none).
	SlurmJob string
	// ClientCPUs are the CPUs of this machine the load generator runs on
	// during each run's load; local engines' processes are kept off them
	// (empty: no pinning).
	ClientCPUs []int
	Stdout     io.Writer
	Stderr     io.Writer

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
	// Skipped lists the cells given up (after measure's consecutive
	// failures, or a config whose engine does not start, --keep-going),
	// whose later runs were skipped, each with why.
	Skipped []string
	Removed []results.CellInfo
}

// ErrNoResult is wrapped by the error of a sweep that finished with cells
// that have no usable run, or cells given up (their later runs skipped): the
// exports are written, but they are not the results the matrix asked for.
var ErrNoResult = errors.New("not every cell has the results the matrix asked for")

// ErrInterrupted is returned when the sweep was stopped by the user; the
// error text carries the exact resume command.
var ErrInterrupted = errors.New("sweep interrupted")

// sweep is one sweep in progress.
type sweep struct {
	opts  Options
	m     *matrices.Matrix
	cells map[string]matrices.Cell
	// store is the results directory: sweep.json, the journal, the ledger.
	*store
	// sweepLog is where the sweep says what it does (mbench.log, the
	// terminal) and its progress display.
	*sweepLog
	// The parts that run the sweep, assembled once its record is known.
	fleet    *fleet
	engines  *launcher
	instr    *instruments
	runner   *runner
	measurer measurer // the runner outside tests
	// lostRuns counts the runs journaled host_lost by this process.
	lostRuns int
}

// assemble builds the parts that run the sweep the store records: the fleet
// of its hosts, the launcher of its engines, the instruments around its runs
// and the runner of one run, each given what it needs; req is what every
// request carries.
func (s *sweep) assemble(req openloop.Request) {
	st, opts := s.store.state, s.opts
	s.fleet = newFleet(s.m, s.store.dir, st.SweepID, s.sweepLog, opts)
	s.engines = &launcher{sweepLog: s.sweepLog, m: s.m, fleet: s.fleet, marker: st.SweepID, seed: st.Seed, selfEnv: opts.SelfEnv}
	s.instr = &instruments{sweepLog: s.sweepLog, m: s.m, fleet: s.fleet, hosts: s.fleet, engines: s.engines, marker: st.SweepID, selfEnv: opts.SelfEnv,
		probeFiles: newProbeNames(time.Now(), os.Getpid())}
	s.runner = &runner{sweepLog: s.sweepLog, m: s.m, store: s.store, engines: s.engines, instr: s.instr, runtime: s.fleet.runtime,
		request: req, force: opts.Force}
	s.measurer = s.runner
	if opts.measurer != nil {
		s.measurer = opts.measurer
	}
}

func newSweep(m *matrices.Matrix, dir string, opts Options) *sweep {
	opts.Stdout, opts.Stderr = cmp.Or(opts.Stdout, io.Discard), cmp.Or(opts.Stderr, io.Discard)
	if opts.FailLimit <= 0 {
		opts.FailLimit = 3
	}
	s := &sweep{opts: opts, m: m, cells: map[string]matrices.Cell{},
		store: &store{dir: dir, ledger: newLedger(dir, opts.FailLimit), values: runValues{}}, sweepLog: newSweepLog(m.Redact, dir, opts.Stderr, opts.Quiet)}
	for _, c := range m.Cells() {
		s.cells[c.ID] = c
	}
	return s
}

// defaultOut is the default results directory of a matrix.
func defaultOut(name string, now time.Time) string {
	return filepath.Join("results", name+"-"+now.UTC().Format("20060102T150405Z"))
}

func sweepID(name, absDir string) string {
	sum := sha256.Sum256([]byte(absDir))
	return name + "-" + hex.EncodeToString(sum[:6])
}
