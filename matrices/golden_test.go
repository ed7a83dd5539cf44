package matrices

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// errLineRE is the shape every reported problem must have.
var errLineRE = regexp.MustCompile(`^testdata/bad/[a-z_]+\.yaml(:\d+)?: [^ ].*$`)

// TestBadMatricesGolden loads every malformed matrix under testdata/bad and
// compares the complete error text with its .golden file.
func TestBadMatricesGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) < 12 {
		t.Fatalf("want ≥ 12 bad matrices, got %d (%v)", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			m, err := Load(f)
			if err == nil {
				t.Fatalf("Load(%s) accepted a bad matrix: %+v", f, m)
			}
			var es Errors
			if !errors.As(err, &es) || es.ExitCode() != 2 {
				t.Fatalf("error is %T, want Errors with ExitCode 2", err)
			}
			got := err.Error() + "\n"
			prev := 0
			for _, e := range es {
				if !errLineRE.MatchString(e.Error()) {
					t.Errorf("badly shaped error line %q", e.Error())
				}
				if e.Line < prev {
					t.Errorf("errors not sorted by line: %d after %d", e.Line, prev)
				}
				prev = e.Line
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./matrices -run Golden -update)", err)
			}
			if got != string(want) {
				t.Errorf("errors differ from %s\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}

// TestErrorsCarryContext checks the format of single problems and that a
// missing file keeps its cause for errors.Is.
func TestErrorsCarryContext(t *testing.T) {
	_, err := Load("testdata/does-not-exist.yaml")
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v does not wrap os.ErrNotExist", err)
	}
	e := &Error{File: "sim.yaml", Line: 12, Field: "configs.noop.kv_transfer_config.kv_role",
		Msg: `unknown value "both"`, Valid: "kv_producer, kv_consumer, kv_both"}
	want := `sim.yaml:12: configs.noop.kv_transfer_config.kv_role: unknown value "both"; valid: kv_producer, kv_consumer, kv_both`
	if e.Error() != want {
		t.Errorf("got  %s\nwant %s", e.Error(), want)
	}
}
