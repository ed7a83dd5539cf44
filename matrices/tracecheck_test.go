package matrices

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodTraceLine = `{"timestamp": 0, "input_length": 1024, "output_length": 16, "hash_ids": [1, 2], "session_id": "s", "turn": 1}`

// TestCheckTrace: each malformed line is refused with "name:line: field".
func TestCheckTrace(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"good", goodTraceLine + "\n\n" + `{"timestamp": 5, "input_length": 1, "output_length": 1, "session_id": 7, "turn": 0}`, ""},
		{"empty", "\n \n", "t.jsonl: no requests"},
		{"not json", goodTraceLine + "\n{oops\n", "t.jsonl:2: json: "},
		{"no timestamp", `{"input_length": 1, "output_length": 1}`, "t.jsonl:1: timestamp: missing"},
		{"negative timestamp", `{"timestamp": -1, "input_length": 1, "output_length": 1}`, "t.jsonl:1: timestamp: must be"},
		{"no input", goodTraceLine + "\n\n" + `{"timestamp": 1, "output_length": 1}`, "t.jsonl:3: input_length: missing"},
		{"zero output", `{"timestamp": 1, "input_length": 1, "output_length": 0}`, "t.jsonl:1: output_length: must be in"},
		{"float length", `{"timestamp": 1, "input_length": 1.5, "output_length": 1}`, "t.jsonl:1: input_length: want int"},
		{"too many blocks", `{"timestamp": 1, "input_length": 513, "output_length": 1, "hash_ids": [1, 2, 3]}`, "t.jsonl:1: hash_ids: 3 blocks"},
		{"bad hash id", `{"timestamp": 1, "input_length": 513, "output_length": 1, "hash_ids": ["a"]}`, "t.jsonl:1: hash_ids: want int64"},
		{"bad session", `{"timestamp": 1, "input_length": 5, "output_length": 1, "session_id": [1]}`, "t.jsonl:1: session_id: want a string"},
		{"negative turn", `{"timestamp": 1, "input_length": 5, "output_length": 1, "turn": -2}`, "t.jsonl:1: turn: must be ≥ 0"},
		{"repeated turn", goodTraceLine + "\n" + goodTraceLine, `t.jsonl:2: turn: session "s" repeats turn 1 (first at line 1)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkTrace(strings.NewReader(tc.body), "t.jsonl")
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused a good trace: %v", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Fatalf("error %v, want prefix %q", err, tc.want)
			}
		})
	}
}

// TestLoadRefusesBadTrace: Load names the matrix line of the trace path and
// the trace's own file:line.
func TestLoadRefusesBadTrace(t *testing.T) {
	dir := t.TempDir()
	trace := goodTraceLine + "\n" + `{"timestamp": 1, "input_length": 0, "output_length": 1}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "bad.jsonl"), []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	m := "name: t\nseed: 1\nengine: {kind: sim}\nconfigs: {plain: {}}\nrates: [1]\n" +
		"shapes:\n  - trace: {path: bad.jsonl}\nmeasure: {min_completed: 1}\n"
	p := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(p, []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	want := p + ":7: shapes[0].trace.path: bad trace: " + filepath.Join(dir, "bad.jsonl") + ":2: input_length: must be in [1, 4194304], got 0"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Load error:\n%v\nwant prefix:\n%s", err, want)
	}
	if _, err := Parse(p, []byte(m)); err != nil {
		t.Errorf("Parse does not read trace files, yet: %v", err)
	}
}

// FuzzCheckTrace: the trace checker never panics and names a line.
func FuzzCheckTrace(f *testing.F) {
	f.Add([]byte(goodTraceLine + "\n"))
	f.Add([]byte(`{"timestamp": 1e400, "input_length": 9, "output_length": 1, "hash_ids": [1], "turn": 0, "session_id": "x"}`))
	if data, err := os.ReadFile("testdata/traces/tiny.jsonl"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := checkTrace(strings.NewReader(string(data)), "f.jsonl")
		if err != nil && !strings.HasPrefix(err.Error(), "f.jsonl") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}
