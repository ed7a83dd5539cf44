package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The resume and fault tests run mbench as a mbenchChild process (this test binary
// re-executed), so that it can be killed, interrupted and resumed like the
// real program. With MBENCH_TEST_MAIN=1 the mbenchChild runs the real main, with
// its signal handling (TestMain's MBENCH_TEST_AS_MBENCH path has its own);
// the engines it starts inherit the variable and run main too.
func init() {
	if os.Getenv("MBENCH_TEST_MAIN") == "1" {
		// What it starts over SSH (which does not inherit this
		// environment) must act as mbench too.
		selfEnv = func() []string { return []string{"MBENCH_TEST_AS_MBENCH=1"} }
		main()
		os.Exit(0)
	}
}

// simMatrix is the small sim sweep of these tests (2 configs × 2 rates × 2
// blocks by default); writeSimMatrix fills in the %KEYS%.
const simMatrix = `name: %NAME%
seed: 7
engine:
  kind: sim
  port: %PORT%
  ready_timeout: 20s
  grace: 2s
  sim: {step_base_us: 1000, decode_seq_us: 20, prefill_token_us: 0.5}
%ENV%configs:
%CONFIGS%
rates: [%RATES%]
shapes:
  - {name: 64x8, input: 64, output: 8}
measure: {warmup_requests: 3, min_completed: 20, timeout: 20s, drain_timeout: 3s}
repeat: {min: %BLOCKS%, max: %BLOCKS%, metric: ttft_p90, rel_ci: 0.05, confidence: 0.95}
gate: {enabled: false}
baseline: plain
`

const simTwoConfigs = "  plain: {}\n  walk:\n    sim: {connector: walk, walk_ns_per_block: 2000}"

func writeSimMatrix(t *testing.T, path string, repl map[string]string) {
	t.Helper()
	def := map[string]string{"%NAME%": "fault", "%CONFIGS%": simTwoConfigs, "%RATES%": "20, 40", "%BLOCKS%": "2", "%ENV%": ""}
	for k, v := range repl {
		def[k] = v
	}
	if def["%PORT%"] == "" {
		def["%PORT%"] = freeLocalPort(t)
	}
	body := simMatrix
	for k, v := range def {
		body = strings.ReplaceAll(body, k, v)
	}
	writeTestFile(t, path, []byte(body))
}

// freeLocalPort is an engine port for a test sweep: see freePortBase.
func freeLocalPort(t *testing.T) string {
	t.Helper()
	return freePortBase(t)
}

type sweepRecord struct {
	SweepID string `json:"sweep_id"`
	Blocks  []struct {
		Block int      `json:"block"`
		Seed  int64    `json:"seed"`
		Order []string `json:"order"`
	} `json:"blocks"`
	Cells []struct {
		ID, Config string
		Rate       float64
	} `json:"cells"`
	Removed     []struct{ ID string }    `json:"removed_cells"`
	Fingerprint map[string]string        `json:"fingerprint"`
	Stop        *struct{ Reason string } `json:"stop"`
}

func readSweepRecord(t *testing.T, out string) sweepRecord {
	t.Helper()
	var st sweepRecord
	b, err := os.ReadFile(filepath.Join(out, "sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("sweep.json does not parse: %v", err)
	}
	return st
}

type journalRec struct {
	Cell, Status, Dir, Reason string
	Block                     int
	// Superseded are the attempts of a run run again in place (after
	// client_limited ones), each with its directory.
	Superseded []struct{ Dir string }
}

// readJournalStrict parses journal.jsonl strictly: every line whole, no run twice.
func readJournalStrict(t *testing.T, out string) []journalRec {
	t.Helper()
	path := filepath.Join(out, "journal.jsonl")
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("journal.jsonl ends in a torn line: %q", b[bytes.LastIndexByte(b, '\n')+1:])
	}
	var js []journalRec
	seen := map[string]bool{}
	for i, r := range readJSONLStrict(t, path) {
		var j journalRec
		data, _ := json.Marshal(r)
		if json.Unmarshal(data, &j) != nil || j.Cell == "" || j.Block == 0 {
			t.Errorf("journal.jsonl:%d: not a journal line: %s", i+1, data)
			continue
		}
		if k := j.Cell + "/b" + strconv.Itoa(j.Block); seen[k] {
			t.Errorf("journal.jsonl:%d: run %s journaled twice", i+1, k)
		} else {
			seen[k] = true
		}
		js = append(js, j)
	}
	return js
}

// journaledDirs returns the run directories the journal names, leniently
// (for polling while mbench runs).
func journaledDirs(out string) map[string]bool {
	b, _ := os.ReadFile(filepath.Join(out, "journal.jsonl"))
	dirs := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		var j journalRec
		if json.Unmarshal([]byte(l), &j) == nil && j.Dir != "" {
			dirs[j.Dir] = true
		}
	}
	return dirs
}

// readJSONLStrict parses a JSON Lines file, failing the test on any bad line.
func readJSONLStrict(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return nil
	}
	var out []map[string]any
	for i, l := range strings.Split(string(b), "\n") {
		var r map[string]any
		if l == "" && i == strings.Count(string(b), "\n") {
			break
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Errorf("%s:%d does not parse: %v", path, i+1, err)
			continue
		}
		out = append(out, r)
	}
	return out
}

// checkRunDir asserts that a journaled ok run's directory is complete and
// that every file in it parses.
func checkRunDir(t *testing.T, dir string) {
	t.Helper()
	var sum map[string]any
	if data, err := os.ReadFile(filepath.Join(dir, "summary_A.json")); err != nil || json.Unmarshal(data, &sum) != nil {
		t.Errorf("%s: summary_A.json missing or unparsable (%v)", dir, err)
	}
	for _, f := range []string{"requests.jsonl", "metrics.jsonl", "engine_step.jsonl", "host.jsonl", "gpu.jsonl"} {
		if n := len(readJSONLStrict(t, filepath.Join(dir, f))); f == "requests.jsonl" && n < 23 {
			t.Errorf("%s: %d requests, want >= 23 (3 warmup + 20 measured)", dir, n)
		}
	}
}

// checkFinished asserts the ground truth of a finished sweep in out: every
// (cell, block) of the plan in sweep.json journaled exactly once, every
// journaled ok run's directory complete and parsing, and every run directory
// either journaled (b<k>) or a kept partial (b<k>.partial-<n>).
func checkFinished(t *testing.T, out string) []journalRec {
	t.Helper()
	st := readSweepRecord(t, out)
	if st.Stop == nil {
		t.Errorf("sweep.json has no stop record")
	}
	j := readJournalStrict(t, out)
	got := map[string]journalRec{}
	for _, l := range j {
		got[l.Cell+"/b"+strconv.Itoa(l.Block)] = l
	}
	cells := map[string]bool{}
	for _, c := range st.Cells {
		cells[c.ID] = true
	}
	want, have := 0, 0
	for _, b := range st.Blocks {
		for _, id := range b.Order {
			if !cells[id] {
				continue
			}
			want++
			l, ok := got[id+"/b"+strconv.Itoa(b.Block)]
			switch {
			case !ok:
				t.Errorf("run %s b%d of the plan has no journal line", id, b.Block)
			case strings.HasPrefix(l.Reason, "skipped:"):
			case l.Dir != filepath.Join("runs", id, "b"+strconv.Itoa(b.Block)) && (len(l.Superseded) == 0 ||
				l.Dir != filepath.Join("runs", id, fmt.Sprintf("b%d-try%d", b.Block, len(l.Superseded)+1))):
				t.Errorf("run %s b%d: journaled dir %q", id, b.Block, l.Dir)
			case l.Status != "failed":
				checkRunDir(t, filepath.Join(out, l.Dir))
			}
		}
	}
	for _, l := range got {
		if cells[l.Cell] {
			have++
		}
	}
	if have != want {
		t.Errorf("journal has %d runs of the sweep's cells, the plan %d", have, want)
	}
	dirs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "b*"))
	for _, d := range dirs {
		rel, _ := filepath.Rel(out, d)
		if base, _, partial := strings.Cut(rel, ".partial-"); partial {
			// An interrupted re-run attempt (b<k>-try<n>) is kept beside
			// the run it was an attempt of (b<k>).
			run, _, _ := strings.Cut(base, "-try")
			if _, err := os.Stat(filepath.Join(out, run)); err != nil {
				t.Errorf("partial %s without the run's real directory", rel)
			}
			continue
		}
		parts := strings.Split(rel, string(filepath.Separator))
		block, _, _ := strings.Cut(parts[2], "-try")
		l, ok := got[parts[1]+"/"+block]
		journaled := ok && l.Dir == rel
		for _, a := range l.Superseded {
			journaled = journaled || a.Dir == rel
		}
		if !journaled {
			t.Errorf("run directory %s has no journal line (a duplicate or an unfinished run)", rel)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "report.md")); err != nil {
		t.Error(err)
	}
	return j
}

// TestResumePlanEditsAndFingerprint covers issue 6's resume semantics on one
// results directory: after a kill -9 and a torn last journal line, a changed
// environment fingerprint is refused (saying what changed) and nothing is
// touched; resume --force repairs the journal, redoes the torn run (its
// directory kept as a partial) and continues the recorded plan exactly (same
// block orders and seeds); then `run EDITED --out DIR` keeps the unchanged
// cells byte for byte, runs the changed ones and lists the removed ones.
func TestResumePlanEditsAndFingerprint(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("resume sweep")
	}
	dir := t.TempDir()
	port := freeLocalPort(t)
	m1, m2, out := filepath.Join(dir, "m1.yaml"), filepath.Join(dir, "m2.yaml"), filepath.Join(dir, "out")
	writeSimMatrix(t, m1, map[string]string{"%PORT%": port})
	t.Cleanup(func() { killMarked(out) })
	c := startMbench(t, dir, "run", m1, "--out", out, "--quiet")
	waitChild(c, time.Minute, func() bool { return len(journaledDirs(out)) >= 3 })
	c.kill()
	planned := readSweepRecord(t, out)

	jpath, spath := filepath.Join(out, "journal.jsonl"), filepath.Join(out, "sweep.json")
	jb, _ := os.ReadFile(jpath)
	lines := strings.SplitAfter(strings.TrimSuffix(string(jb), "\n"), "\n")
	var torn journalRec
	_ = json.Unmarshal([]byte(lines[len(lines)-1]), &torn)
	last := lines[len(lines)-1]
	jb = []byte(strings.Join(lines[:len(lines)-1], "") + last[:len(last)/2])
	writeTestFile(t, jpath, jb)

	var raw map[string]any
	sb, _ := os.ReadFile(spath)
	dec := json.NewDecoder(bytes.NewReader(sb))
	dec.UseNumber() // keep the 64-bit seeds exact
	if err := dec.Decode(&raw); err != nil {
		t.Fatal(err)
	}
	fp := raw["fingerprint"].(map[string]any)
	fp["mbench_version"], fp["gpus"] = "0.0.1-old", "NVIDIA H100 80GB HBM3"
	sb, _ = json.MarshalIndent(raw, "", "  ")
	writeTestFile(t, spath, sb)
	for _, args := range [][]string{{"resume", out, "--quiet"}, {"run", m1, "--out", out, "--quiet"}} {
		c := startMbench(t, dir, args...)
		if code := c.wait(time.Minute); code != 1 {
			t.Errorf("%v with a changed fingerprint: exit %d, want 1", args[0], code)
		}
		for _, want := range []string{`mbench_version: "0.0.1-old" → "` + version + `"`, `gpus: "NVIDIA H100 80GB HBM3" → `, "--force"} {
			if !strings.Contains(c.stderr.String(), want) {
				t.Errorf("%v: the refusal does not say %q:\n%s", args[0], want, c.stderr.String())
			}
		}
		if b, _ := os.ReadFile(jpath); !bytes.Equal(b, jb) {
			t.Errorf("%v: a refused resume changed the journal", args[0])
		}
		if b, _ := os.ReadFile(spath); !bytes.Equal(b, sb) {
			t.Errorf("%v: a refused resume changed sweep.json", args[0])
		}
	}

	c = startMbench(t, dir, "resume", out, "--force", "--quiet")
	mustFinish(t, c, 2*time.Minute)
	j := checkFinished(t, out)
	for _, l := range j {
		if !measuredVerdict(t, l) {
			t.Errorf("run %s: %s (%s)", l.Dir, l.Status, l.Reason)
		}
	}
	st := readSweepRecord(t, out)
	if st.Fingerprint["mbench_version"] != version {
		t.Errorf("fingerprint after --force: %v", st.Fingerprint)
	}
	for i, b := range planned.Blocks {
		if got := st.Blocks[i]; got.Seed != b.Seed || strings.Join(got.Order, ",") != strings.Join(b.Order, ",") {
			t.Errorf("block %d: recorded seed %d order %v before the kill, %d %v after resume", b.Block, b.Seed, b.Order, got.Seed, got.Order)
		}
	}
	for _, b := range st.Blocks {
		var ran []string
		for _, l := range j {
			if l.Block == b.Block {
				ran = append(ran, l.Cell)
			}
		}
		if strings.Join(ran, ",") != strings.Join(b.Order, ",") {
			t.Errorf("block %d ran in order %v, planned %v", b.Block, ran, b.Order)
		}
	}
	tornDir := filepath.Join(out, torn.Dir+".partial-1")
	if _, err := os.Stat(filepath.Join(tornDir, "summary_A.json")); err != nil {
		t.Errorf("the run whose journal line was torn should be redone with its directory kept as %s: %v", tornDir, err)
	}
	checkSeeds(t, out, st, j)

	// Edit the matrix: walk changes (new cell ids), plain does not.
	keep := map[string]string{}
	for _, cl := range st.Cells {
		if cl.Config == "plain" {
			keep[cl.ID] = treeDigest(t, filepath.Join(out, "runs", cl.ID))
		}
	}
	jb, _ = os.ReadFile(jpath)
	writeSimMatrix(t, m2, map[string]string{"%PORT%": port, "%CONFIGS%": strings.Replace(simTwoConfigs, "2000", "3000", 1)})
	c = startMbench(t, dir, "run", m2, "--out", out, "--quiet")
	mustFinish(t, c, 2*time.Minute)
	j2 := checkFinished(t, out)
	st2 := readSweepRecord(t, out)
	if b, _ := os.ReadFile(jpath); !bytes.HasPrefix(b, jb) || len(j2) != len(j)+4 {
		t.Errorf("journal after the edit: %d lines, want the old %d unchanged plus 4 new", len(j2), len(j))
	}
	for _, l := range j2[len(j):] {
		if _, kept := keep[l.Cell]; kept {
			t.Errorf("unchanged cell %s b%d was run again", l.Cell, l.Block)
		}
	}
	for id, d := range keep {
		if got := treeDigest(t, filepath.Join(out, "runs", id)); got != d {
			t.Errorf("runs/%s of an unchanged cell changed:\nbefore %s\nafter  %s", id, d, got)
		}
	}
	removed := map[string]bool{}
	for _, r := range st2.Removed {
		removed[r.ID] = true
	}
	for _, cl := range st.Cells {
		if _, kept := keep[cl.ID]; kept {
			continue
		}
		if !removed[cl.ID] || !strings.Contains(c.stderr.String(), "removed cell (results kept on disk): "+cl.ID) {
			t.Errorf("removed cell %s not recorded in sweep.json or not listed:\n%s", cl.ID, c.output())
		}
	}
	checkSeeds(t, out, st2, j2)
	assertNoEngines(t, out, 3*time.Second)
}

// checkSeeds: within a block every cell of the same rate saw the same
// arrival schedule (the block seed), and a cell's schedule differs across
// blocks.
func checkSeeds(t *testing.T, out string, st sweepRecord, j []journalRec) {
	t.Helper()
	rate := map[string]float64{}
	for _, c := range st.Cells {
		rate[c.ID] = c.Rate
	}
	seen := map[string]string{}
	for _, l := range j {
		if _, ok := rate[l.Cell]; !ok || l.Status != "ok" {
			continue
		}
		// Arrival offsets from the first request of each phase (the run's
		// start varies, and the measured schedule resumes, shifted whole,
		// when the warm-up has finished).
		at, phase, first := map[int]int64{}, map[int]string{}, map[string]int64{}
		for _, r := range readJSONLStrict(t, filepath.Join(out, l.Dir, "requests.jsonl")) {
			id, ns, p := int(r["id"].(float64)), int64(r["scheduled_ns"].(float64)), r["phase"].(string)
			at[id], phase[id] = ns, p
			if f, ok := first[p]; !ok || ns < f {
				first[p] = ns
			}
		}
		var sched []string
		for id := 1; id < 20; id++ {
			sched = append(sched, strconv.FormatInt(at[id]-first[phase[id]], 10))
		}
		s := strings.Join(sched, ",")
		k := fmt.Sprintf("b%d r%g", l.Block, rate[l.Cell])
		if prev, ok := seen[k]; ok && prev != s {
			t.Errorf("%s: cells of the same rate and block got different schedules (%s)", k, l.Dir)
		}
		seen[k] = s
		if o := seen[fmt.Sprintf("b%d r%g", 3-l.Block, rate[l.Cell])]; o == s {
			t.Errorf("%s: the same schedule in both blocks", k)
		}
	}
}

// treeDigest lists every file under root with its size, mtime and content
// hash.
func treeDigest(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		fmt.Fprintf(&b, "%s %d %d %x\n", strings.TrimPrefix(p, root), fi.Size(), fi.ModTime().UnixNano(), sha256.Sum256(data))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func writeTestFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
