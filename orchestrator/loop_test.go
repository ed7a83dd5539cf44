package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/results/sweepdir"
)

// scripted is a measurer that starts nothing: each run's ttft_p90 and
// verdict come from its script, and it writes the summary_A.json a real run
// leaves (what a resume verifies and the export reads). after, when set, is
// called after the n-th run it measured (from 1), inside that run.
type scripted struct {
	script func(r run) (p90 float64, v results.Verdict, err error)
	after  func(n int)
	runs   []string // the runs measured, in order (cell/b<block>)
}

func (f *scripted) measure(_ context.Context, r run) (*results.RunSummary, error) {
	f.runs = append(f.runs, r.key())
	if f.after != nil {
		defer f.after(len(f.runs))
	}
	p90, v, err := f.script(r)
	if err != nil {
		return nil, err
	}
	sum := &results.RunSummary{Simulated: true, Engine: "sim", Cell: r.cell.ID, Config: r.cell.Config, Shape: r.cell.Shape,
		Rate: r.cell.Rate, Block: r.block, P90TTFTMs: &p90, Verdict: v}
	if v != results.VerdictOK {
		sum.VerdictReasons = []string{string(v) + ": scripted"}
	}
	if err := sweepdir.WriteRunSummary(filepath.Join(r.dir, "summary_A.json"), sum); err != nil {
		return nil, err
	}
	return sum, nil
}

// allOK scripts every run ok with a ttft_p90 of 10 ms (20 ms for taxed).
func allOK(r run) (float64, results.Verdict, error) {
	if r.cell.Config == "taxed" {
		return 20, results.VerdictOK, nil
	}
	return 10 + 0.01*float64(r.block), results.VerdictOK, nil
}

// loopOpts are the options of an in-process sweep into out measured by f.
func loopOpts(out string, f measurer) Options {
	return Options{Out: out, Quiet: true, Version: "test", measurer: f}
}

// journalOf reads out's journal: its entries in file order.
func journalOf(t *testing.T, out string) []JournalEntry {
	t.Helper()
	entries, torn, err := readJournal(out)
	if err != nil || torn {
		t.Fatalf("journal: torn %v, %v", torn, err)
	}
	return entries
}

// keysOf is each entry's run key, in order, and fails on a run journaled
// twice.
func keysOf(t *testing.T, entries []JournalEntry) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for _, e := range entries {
		k := fmt.Sprintf("%s/b%d", e.Cell, e.Block)
		if seen[k] {
			t.Errorf("run %s journaled twice", k)
		}
		seen[k] = true
		out = append(out, k)
	}
	return out
}

// plannedOrder is every recorded block's runs, block by block in recorded
// order (cell/b<block>).
func plannedOrder(t *testing.T, out string) []string {
	t.Helper()
	st, err := ReadSweep(out)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, b := range st.Blocks {
		for _, id := range b.Order {
			keys = append(keys, fmt.Sprintf("%s/b%d", id, b.Block))
		}
	}
	return keys
}

// TestLoopResumeMidBlock: a sweep interrupted in the middle of its second
// block journals only the runs that finished (the interrupted one has no
// line, its directory is kept aside); the resume runs exactly the missing
// runs, the interrupted one first, in the recorded orders, and the sweep
// ends with every run journaled once.
func TestLoopResumeMidBlock(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := &scripted{script: func(r run) (float64, results.Verdict, error) {
		if r.cell.Config == "taxed" && r.block == 1 {
			return 20, results.VerdictSaturated, nil
		}
		return allOK(r)
	}, after: func(n int) {
		if n == 5 { // the second run of block 2
			cancel()
		}
	}}
	if _, err := Run(ctx, "testdata/loop.yaml", loopOpts(out, first)); !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), "mbench resume") {
		t.Fatalf("interrupted sweep: %v; want ErrInterrupted with the resume command", err)
	}
	planned := plannedOrder(t, out)
	if got := keysOf(t, journalOf(t, out)); !slices.Equal(got, planned[:4]) {
		t.Fatalf("journal after the interrupt %v; want the first 4 planned runs %v", got, planned[:4])
	}

	second := &scripted{script: allOK}
	var stderr bytes.Buffer
	opts := loopOpts(out, second)
	opts.Quiet, opts.Stderr = false, &stderr
	o, err := Resume(context.Background(), out, opts)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	// The resume says where it starts; the run lines follow, and nothing
	// after the sweep's stop.
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if want := "resuming " + out + ": 4 of 12 runs done (1 not results), 8 to go"; !slices.Contains(lines, want) {
		t.Errorf("resume printed\n%s\nwant the line %q", stderr.String(), want)
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "sweep stopped: ") {
		t.Errorf("last line %q, want the sweep's stop", last)
	}
	for _, l := range lines {
		if strings.HasSuffix(l, ": ") || strings.HasPrefix(l, "[0/") {
			t.Errorf("an empty or uncounted line: %q", l)
		}
	}
	planned = plannedOrder(t, out)
	if len(planned) != 12 || !slices.Equal(second.runs, planned[4:]) {
		t.Errorf("resume measured %v; want the missing runs in the recorded order %v", second.runs, planned[4:])
	}
	if got := keysOf(t, journalOf(t, out)); !slices.Equal(got, planned) {
		t.Errorf("journal %v; want the planned runs %v", got, planned)
	}
	interrupted := strings.Split(first.runs[4], "/")
	if _, err := os.Stat(filepath.Join(out, "runs", interrupted[0], interrupted[1]+".partial-1")); err != nil {
		t.Errorf("the interrupted run's directory was not kept aside: %v", err)
	}
	if o.Verdicts[results.VerdictOK] != 11 || !strings.HasPrefix(o.StopReason, "reached repeat.max = 4 blocks") || len(o.Unusable) != 0 {
		t.Errorf("outcome %+v", o)
	}
	if _, err := os.Stat(o.Report); err != nil {
		t.Errorf("no report: %v", err)
	}
	st, err := ReadSweep(out)
	if err != nil || st.Design == nil || !st.Design.Balance.Balanced || len(st.Blocks) != 4 {
		t.Errorf("sweep.json design after 4 blocks: %+v, %v", st.Design, err)
	}
}

// TestLoopFailLimit: a cell whose runs fail is given up after FailLimit
// consecutive failures: its later runs are journaled as skipped without
// being measured, and the outcome names it as a cell without a usable run;
// a cell with a usable run between its failures is not (that a success
// resets the count is TestLedger's).
func TestLoopFailLimit(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	f := &scripted{script: func(r run) (float64, results.Verdict, error) {
		switch {
		case r.cell.Config == "taxed":
			return 0, "", errors.New("engine-local-0 on host local exited during the run")
		case r.cell.Config == "plain_aa" && r.block != 3:
			return 0, "", errors.New("engine never became ready")
		}
		return allOK(r)
	}}
	opts := loopOpts(out, f)
	opts.FailLimit = 3
	o, err := Run(context.Background(), "testdata/loop.yaml", opts)
	if err != nil {
		t.Fatal(err)
	}
	var taxedMeasured, skipped int
	for _, k := range f.runs {
		if strings.HasPrefix(k, cellID(t, out, "taxed")+"/") {
			taxedMeasured++
		}
	}
	for _, e := range journalOf(t, out) {
		if e.Cell == cellID(t, out, "taxed") {
			if e.Status != results.VerdictFailed {
				t.Errorf("taxed b%d: %s", e.Block, e.Status)
			}
			if strings.HasPrefix(e.Reason, "skipped: the cell failed 3 consecutive runs") {
				skipped++
			}
		}
	}
	if taxedMeasured != 3 || skipped != 1 {
		t.Errorf("taxed: measured %d runs and skipped %d; want 3 measured and the 4th skipped", taxedMeasured, skipped)
	}
	if len(o.Unusable) != 1 || !strings.HasPrefix(o.Unusable[0], cellID(t, out, "taxed")+" (taxed") {
		t.Errorf("unusable cells %v; want taxed alone (plain_aa had a success between its failures)", o.Unusable)
	}
	if o.Verdicts[results.VerdictFailed] != 4+3 || o.Verdicts[results.VerdictOK] != 4+1 {
		t.Errorf("verdicts %v", o.Verdicts)
	}
}

// cellID is the id of config's cell in out's sweep.
func cellID(t *testing.T, out, config string) string {
	t.Helper()
	st, err := ReadSweep(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Cells {
		if c.Config == config {
			return c.ID
		}
	}
	t.Fatalf("no cell of %s", config)
	return ""
}

// TestLoopDiskFull: a run that fails because the disk is full stops the
// sweep with no journal line for it (the journal and the runs recorded stay
// intact) and an error that says so and how to continue; the resume redoes
// that run first.
func TestLoopDiskFull(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	full := true
	f := &scripted{}
	f.script = func(r run) (float64, results.Verdict, error) {
		if full && len(f.runs) == 3 { // the sweep's third run
			return 0, "", fmt.Errorf("write requests.jsonl: %w", &os.PathError{Op: "write", Path: "requests.jsonl", Err: syscall.ENOSPC})
		}
		return allOK(r)
	}
	_, err := Run(context.Background(), "testdata/loop.yaml", loopOpts(out, f))
	if err == nil || !strings.Contains(err.Error(), "is full") || !strings.Contains(err.Error(), "mbench resume") {
		t.Fatalf("disk full: %v; want an error that says the disk is full and how to continue", err)
	}
	if got := keysOf(t, journalOf(t, out)); !slices.Equal(got, f.runs[:2]) {
		t.Errorf("journal %v; want the 2 runs before the full disk %v", got, f.runs[:2])
	}
	full = false
	g := &scripted{script: allOK}
	if _, err := Resume(context.Background(), out, loopOpts(out, g)); err != nil {
		t.Fatal(err)
	}
	if len(g.runs) != 10 || g.runs[0] != f.runs[2] {
		t.Errorf("resume measured %v; want the 10 missing runs, the one the full disk stopped first (%s)", g.runs, f.runs[2])
	}
}

// queue is the scripted engine of the capacity tests: ttft_p90 =
// 10 ms / (1 − rate/mu), 2% higher in each later block, saturated from
// 0.97·mu on: the mean over blocks 1–3 crosses the 30 ms limit at
// mu·(1 − 1.02/3).
func queue(mu map[string]float64) func(r run) (float64, results.Verdict, error) {
	return func(r run) (float64, results.Verdict, error) {
		m := mu[r.cell.Config]
		if r.cell.Rate >= 0.97*m {
			return 0, results.VerdictSaturated, nil
		}
		return 10 / (1 - r.cell.Rate/m) * (1 + 0.02*float64(r.block-1)), results.VerdictOK, nil
	}
}

// TestLoopCapacityReplay: a capacity search interrupted after 8 runs and
// resumed runs exactly the rounds sweep.json records (each round recorded
// before its runs, its blocks seeded as the fixed-rate blocks are, every
// run once), brackets each config's known capacity, finds the taxed one
// lower with a paired CI below 0, writes the capacity report, and refuses a
// resume whose recorded rounds were tampered with.
func TestLoopCapacityReplay(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	mu := map[string]float64{"plain": 150, "taxed": 90}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := &scripted{script: queue(mu), after: func(n int) {
		if n == 8 {
			cancel()
		}
	}}
	if _, err := Run(ctx, "testdata/capacity.yaml", loopOpts(out, first)); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupted search: %v", err)
	}
	second := &scripted{script: queue(mu)}
	o, err := Resume(context.Background(), out, loopOpts(out, second))
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if len(o.Unusable) != 0 {
		t.Errorf("unusable: %v", o.Unusable)
	}
	ran := keysOf(t, journalOf(t, out))
	st, err := ReadSweep(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.CapacityRounds) < 3 {
		t.Fatalf("%d capacity rounds recorded, want lo/hi and at least two more", len(st.CapacityRounds))
	}
	var round1 []string
	for _, p := range st.CapacityRounds[0].Probes {
		round1 = append(round1, fmt.Sprintf("%s@%g", p.Config, p.Rate))
	}
	if want := []string{"plain@160", "plain@40", "taxed@160", "taxed@40"}; !slices.Equal(slices.Sorted(slices.Values(round1)), want) {
		t.Errorf("round 1 probed %v; want lo and hi of each config %v", round1, want)
	}
	seeds := map[int]int64{}
	var planned []string
	for i, r := range st.CapacityRounds {
		var cells []string
		for _, p := range r.Probes {
			cells = append(cells, p.Cell)
		}
		if r.Round != i+1 || len(r.Probes) == 0 || len(r.Blocks) != 3 {
			t.Errorf("round %d (#%d): %d probes, %d blocks", r.Round, i+1, len(r.Probes), len(r.Blocks))
		}
		for _, b := range r.Blocks {
			if old, ok := seeds[b.Block]; ok && old != b.Seed {
				t.Errorf("round %d block %d: seed %d, earlier rounds %d", r.Round, b.Block, b.Seed, old)
			}
			seeds[b.Block] = b.Seed
			if got, want := slices.Sorted(slices.Values(b.Order)), slices.Sorted(slices.Values(cells)); !slices.Equal(got, want) {
				t.Errorf("round %d block %d: order %v is not a permutation of the probes %v", r.Round, b.Block, b.Order, cells)
			}
			for _, id := range b.Order {
				planned = append(planned, fmt.Sprintf("%s/b%d", id, b.Block))
			}
		}
	}
	if !slices.Equal(planned, ran) || !slices.Equal(append(slices.Clone(first.runs[:7]), second.runs...), ran) {
		t.Errorf("the journal's runs differ from the recorded rounds:\nrecorded %v\njournal  %v", planned, ran)
	}

	rep, err := sweepdir.ReadCapacity(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Searches {
		truth := mu[s.Config] * (1 - 1.02/3) // where the mean over the 3 blocks crosses 30 ms
		for _, p := range s.Probes {
			if len(p.Runs) != 3 {
				t.Errorf("%s rate %g: %d runs, want one in each of 3 blocks", s.Config, p.Rate, len(p.Runs))
			}
		}
		switch {
		case s.Lo == nil || s.Hi == nil || !strings.HasPrefix(s.Note, "bracketed"):
			t.Errorf("%s: the search did not bracket the capacity: %s", s.Config, s.Note)
		case *s.Lo > truth || *s.Hi < truth:
			t.Errorf("%s: [%g, %g] misses the capacity %g", s.Config, *s.Lo, *s.Hi, truth)
		default:
			t.Logf("%s: [%g, %g] holds the capacity %g: %s", s.Config, *s.Lo, *s.Hi, truth, s.Note)
		}
	}
	if len(rep.Comparisons) != 1 || rep.Comparisons[0].Config != "taxed" || rep.Comparisons[0].N < 2 || !(rep.Comparisons[0].Hi < 0) {
		t.Errorf("comparisons %+v; want taxed vs plain paired over the blocks with a CI below 0", rep.Comparisons)
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if i := strings.Index(string(report), "\n## "); i < 0 || !strings.HasPrefix(string(report[i+1:]), "## Capacity at the SLO (ttft_p90 ≤ 30 ms)") {
		t.Errorf("report.md does not lead with the capacity section")
	}
	for _, want := range []string{"less load", "## The probes of the search"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	for _, bad := range []string{"| rate=", "cell at this shape and rate"} {
		if strings.Contains(string(report), bad) {
			t.Errorf("report.md has %q: a fixed-rate table or comparison row across rates the configs did not both probe", bad)
		}
	}

	// A record that the replay does not reproduce stops a resume.
	b := &st.CapacityRounds[0].Blocks[0]
	b.Order[0], b.Order[1] = b.Order[1], b.Order[0]
	if err := writeSweep(out, st); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(context.Background(), out, loopOpts(out, &scripted{script: queue(mu)})); !errors.Is(err, errCapacityReplay) ||
		!strings.Contains(err.Error(), "does not replay the recorded rounds: round 1: block 1") {
		t.Errorf("resume with a tampered round: %v", err)
	}
}

// TestLoopResumeMidRetry: a run graded client_limited is run again in
// place (b<k>-try2); an interrupt during that attempt journals nothing for
// the run, and the resume starts its attempts again: both earlier
// attempts are kept, moved aside (b<k>.partial-1, b<k>-try2.partial-1), the
// new attempt is journaled once, and no attempt directory is left that no
// journal line names.
func TestLoopResumeMidRetry(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := &scripted{script: func(r run) (float64, results.Verdict, error) {
		if strings.HasSuffix(r.dir, "-try2") {
			return allOK(r)
		}
		return 10, results.VerdictClientLimited, nil
	}, after: func(n int) {
		if n == 2 { // inside the second attempt of the first run
			cancel()
		}
	}}
	if _, err := Run(ctx, "testdata/loop.yaml", loopOpts(out, first)); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupted sweep: %v; want ErrInterrupted", err)
	}
	if len(first.runs) != 2 || first.runs[0] != first.runs[1] {
		t.Fatalf("measured %v; want one run twice (a re-run in place)", first.runs)
	}
	if j := journalOf(t, out); len(j) != 0 {
		t.Fatalf("journal %+v after an interrupted re-run; want nothing", j)
	}
	key := strings.Split(first.runs[0], "/")
	cellDir := filepath.Join(out, "runs", key[0])
	second := &scripted{script: allOK}
	if _, err := Resume(context.Background(), out, loopOpts(out, second)); err != nil {
		t.Fatalf("resume: %v", err)
	}
	for _, kept := range []string{key[1] + ".partial-1", key[1] + "-try2.partial-1"} {
		if _, err := os.Stat(filepath.Join(cellDir, kept, "summary_A.json")); err != nil {
			t.Errorf("an earlier attempt was not kept as %s: %v", kept, err)
		}
	}
	if _, err := os.Stat(filepath.Join(cellDir, key[1]+"-try2")); err == nil {
		t.Errorf("%s-try2 left in place: an attempt directory no journal line names", key[1])
	}
	j := journalOf(t, out)
	keysOf(t, j)
	for _, e := range j {
		if fmt.Sprintf("%s/b%d", e.Cell, e.Block) == first.runs[0] && (e.Dir != filepath.Join("runs", key[0], key[1]) || e.Attempt != 0) {
			t.Errorf("the re-run's journal line %+v: want its first attempt's directory", e)
		}
	}
}

// TestLoopGivenUpCellIsNamed: a cell with a usable run, then FailLimit
// consecutive failures, is given up ("marked failed and skipped"): it is
// no cell without a usable run, yet its later runs were skipped, so the
// outcome names it in Skipped (mbench exits 3 on it, cmd/mbench's
// TestFinishSweepSkipped).
func TestLoopGivenUpCellIsNamed(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	f := &scripted{script: func(r run) (float64, results.Verdict, error) {
		if r.cell.Config == "taxed" && r.block > 1 {
			return 0, "", errors.New("engine-local-0 on host local exited during the run")
		}
		return allOK(r)
	}}
	opts := loopOpts(out, f)
	opts.FailLimit = 2
	o, err := Run(context.Background(), "testdata/loop.yaml", opts)
	if err != nil {
		t.Fatal(err)
	}
	id := cellID(t, out, "taxed")
	if len(o.Unusable) != 0 || len(o.Skipped) != 1 || !strings.HasPrefix(o.Skipped[0], id+" (taxed rate=10 s): the cell failed 2 consecutive runs") {
		t.Errorf("unusable %v, skipped %v; want taxed skipped (it has a usable run)", o.Unusable, o.Skipped)
	}
}
