package openloop

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const (
	tinyShareGPT = "testdata/dataset/tiny_sharegpt.json"
	tinyJSONL    = "testdata/dataset/tiny.jsonl"
)

// TestParseShareGPT: the first human turn is the prompt, the first gpt
// turn after it gives the output length in words; entries without such a
// pair are skipped; each item keeps the line its entry starts on.
func TestParseShareGPT(t *testing.T) {
	items, err := LoadDataset(Dataset{Path: tinyShareGPT, Format: DatasetShareGPT}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []DatasetItem{
		{Prompt: "What is the capital of France?", Output: 6, Line: 2},
		{Prompt: "Name three primary colours please", Output: 3, Line: 5},
		{Prompt: "Write a haiku about the sea", Output: 14, Line: 13},
	}
	if !reflect.DeepEqual(items, want) {
		t.Errorf("items\n got %+v\nwant %+v", items, want)
	}
}

func TestParseDatasetJSONL(t *testing.T) {
	d := Dataset{Path: tinyJSONL, Format: DatasetJSONL}
	if _, err := LoadDataset(d, 0); err == nil || !strings.Contains(err.Error(), tinyJSONL+":5: no output length") {
		t.Errorf("a line without output_tokens and no shape output: %v", err)
	}
	items, err := LoadDataset(d, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 4 || items[0].Output != 40 || items[2].Line != 4 || items[3].Output != 0 || items[3].Line != 5 {
		t.Errorf("items %+v", items)
	}
}

// TestDatasetErrors: each bad file is refused with its file:line.
func TestDatasetErrors(t *testing.T) {
	for _, tc := range []struct {
		format     DatasetFormat
		body, want string
	}{
		{DatasetShareGPT, `{"conversations": []}`, "bad:1: a ShareGPT file is a JSON list"},
		{DatasetShareGPT, "[\n  {\"conversations\": [\n    {\"from\": \"human\", \"value\": 5}]}\n]", "bad:3: entry 0: conversations.value: want string, got number"},
		{DatasetShareGPT, "[\n {\"conversations\": []},\n {\"conversations\": [}\n]", "bad:3: entry 1: invalid JSON"},
		// A type error in a later entry: its line in the file, not in the entry.
		{DatasetShareGPT, "[\n {\"conversations\": [\n  {\"from\": \"human\", \"value\": \"hi\"},\n  {\"from\": \"gpt\", \"value\": \"a b\"}\n ]},\n {\"conversations\": [\n  {\"from\": \"human\", \"value\": \"hi\"},\n  {\"from\": \"gpt\", \"value\": 5}\n ]}\n]",
			"bad:8: entry 1: conversations.value: want string, got number"},
		{DatasetShareGPT, "[{\"conversations\": []}\n\n ,\n\n {\"conversations\": [{\"from\": 7}]}]", "bad:5: entry 1: conversations.from: want string, got number"},
		{DatasetShareGPT, "[\n {\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}]}\n]", "bad:1: no entry has a human turn followed by a gpt turn"},
		{DatasetShareGPT, "[\n {\"conversations\": []}\n", "bad:2: invalid JSON: the file ends inside a value"},
		{DatasetShareGPT, "[]\n[]", "bad:2: data after the list"},
		{DatasetShareGPT, "[\n 7\n]", "bad:2: entry 0: want an object {conversations: [...]}, got number"},
		{DatasetJSONL, "{\"prompt\": \"a\", \"output_tokens\": 3}\n{\"prompt\": 4}\n", "bad:2: prompt: want string, got number"},
		{DatasetJSONL, "{\"prompt\": \"a\", \"output_tokens\": 1.5}\n", "bad:1: output_tokens: must be an integer"},
		{DatasetJSONL, "\n\n{\"prompt\": \"a\", \"output_tokens\": 0}\n", "bad:3: output_tokens: must be an integer"},
		{DatasetJSONL, "{\"prompt\": \"\"}\n", "bad:1: prompt: must be a non-empty string"},
		{DatasetJSONL, "{\"output_tokens\": 3}\n", "bad:1: prompt: must be a non-empty string"},
		{DatasetJSONL, "{\"prompt\": \"a\"} {}\n", "bad:1: invalid JSON: more than one value"},
		{DatasetJSONL, "{\"prompt\": \"a\"\n", "bad:1: invalid JSON"},
		{DatasetJSONL, "\n\n", "bad:1: no prompts"},
	} {
		var err error
		if tc.format == DatasetShareGPT {
			_, err = ParseShareGPT("bad", []byte(tc.body))
		} else {
			_, err = ParseDatasetJSONL("bad", strings.NewReader(tc.body))
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: err %v, want %q", tc.format, tc.body, err, tc.want)
		}
	}
	if err := (Shape{Dataset: &Dataset{Path: "x", Format: "csv"}}).Validate(); err == nil {
		t.Error("format csv accepted")
	}
	if err := (Shape{Input: 3, Dataset: &Dataset{Path: "x", Format: DatasetJSONL}}).Validate(); err == nil {
		t.Error("input beside a dataset accepted")
	}
}

// TestDatasetSampling: the prompts drawn are a pure function of the seed,
// differ between seeds, and are uniform over the items (pooled over 20
// seeds, each item's count within 5 σ of its expectation).
func TestDatasetSampling(t *testing.T) {
	items, err := LoadDataset(Dataset{Path: tinyJSONL, Format: DatasetJSONL}, 5)
	if err != nil {
		t.Fatal(err)
	}
	draw := func(seed int64, n int) []string {
		g := promptGen{seed: seed, shape: Shape{Output: 5}, items: items}
		out := make([]string, n)
		for i := range out {
			var o int
			if out[i], o = g.dataset(i); o != 5 {
				t.Fatalf("output %d, want the shape's 5", o)
			}
		}
		return out
	}
	counts := map[string]int{}
	const seeds, n = 20, 500
	seqs := map[string]int64{}
	for s := int64(1); s <= seeds; s++ {
		a := draw(s, n)
		if !reflect.DeepEqual(a, draw(s, n)) {
			t.Fatalf("seed %d: two draws differ", s)
		}
		key := strings.Join(a[:40], "|")
		if prev, dup := seqs[key]; dup {
			t.Errorf("seeds %d and %d draw the same first 40 prompts", prev, s)
		}
		seqs[key] = s
		for _, p := range a {
			counts[p]++
		}
	}
	want := float64(seeds*n) / float64(len(items))
	sigma := math.Sqrt(want * (1 - 1/float64(len(items)))) // binomial
	for _, it := range items {
		if c := float64(counts[it.Prompt]); c < want-5*sigma || c > want+5*sigma {
			t.Errorf("item %q drawn %v times, want %.0f ± %.0f", it.Prompt, c, want, 5*sigma)
		}
	}
}

// TestDatasetCache: an unchanged file is parsed once; a changed one again.
func TestDatasetCache(t *testing.T) {
	p := filepath.Join(t.TempDir(), "d.jsonl")
	if err := os.WriteFile(p, []byte(`{"prompt": "a b", "output_tokens": 2}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := Dataset{Path: p, Format: DatasetJSONL}
	a, err := LoadDataset(d, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(`{"prompt": "a b c", "output_tokens": 2}`+"\n"+`{"prompt": "x", "output_tokens": 1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := LoadDataset(d, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 1 || len(b) != 2 {
		t.Errorf("%d then %d items: the changed file was not read again", len(a), len(b))
	}
}

func FuzzParseShareGPT(f *testing.F) {
	data, err := os.ReadFile(tinyShareGPT)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	for _, s := range []string{`[]`, `[{}]`, `[{"conversations":[{"from":"human","value":"a"},{"from":"gpt","value":"b c"}]}]`, `[7]`, `{`, "[\n{\"conversations\":[{\"from\":1}]}]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		items, err := ParseShareGPT("f", b)
		checkParsedItems(t, b, items, err, 1, math.MaxInt)
	})
}

func FuzzParseDatasetJSONL(f *testing.F) {
	data, err := os.ReadFile(tinyJSONL)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	for _, s := range []string{"{\"prompt\":\"a\"}", "{\"prompt\":\"a\",\"output_tokens\":1e2}\n", "\n{}\n", "{\"prompt\":\"\\u0000\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		items, err := ParseDatasetJSONL("f", bytes.NewReader(b))
		checkParsedItems(t, b, items, err, 0, maxTokens)
	})
}

// checkParsedItems is what both prompt-file fuzzers require of a parse of b
// (file name "f"): an error names the file and line; every item has a
// prompt, an output count in [minOutput, maxOutput] and a line of b.
func checkParsedItems(t *testing.T, b []byte, items []DatasetItem, err error, minOutput, maxOutput int) {
	t.Helper()
	if err != nil {
		if !strings.HasPrefix(err.Error(), "f:") {
			t.Fatalf("error without file:line: %v", err)
		}
		return
	}
	lines := 1 + bytes.Count(b, []byte{'\n'})
	for _, it := range items {
		if strings.TrimSpace(it.Prompt) == "" || it.Output < minOutput || it.Output > maxOutput || it.Line < 1 || it.Line > lines {
			t.Fatalf("item %+v from %q", it, b)
		}
	}
}
