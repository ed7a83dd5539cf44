package openloop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/mbench/mbench/internal/userfile"
)

// DatasetFormat names the layout of a prompt file.
type DatasetFormat string

// The dataset formats.
const (
	// DatasetShareGPT is ShareGPT-style JSON: a list of
	// {"conversations": [{"from": "human", "value": ...}, {"from": "gpt",
	// "value": ...}, ...]}. The first human (or user) turn is the prompt;
	// the first gpt (or assistant, chatgpt) turn after it gives the output
	// length, as its number of whitespace-separated words (mbench has no
	// tokenizer: on a real engine a word is ~1.3 tokens, so set the shape's
	// output to ask for an exact length). Entries without such a pair are
	// skipped, as vllm bench skips them.
	DatasetShareGPT DatasetFormat = "sharegpt"
	// DatasetJSONL is one JSON object a line: {"prompt": "...",
	// "output_tokens": N}, output_tokens optional when the shape sets output.
	DatasetJSONL DatasetFormat = "jsonl"
)

// DatasetFormats lists the valid formats.
var DatasetFormats = []DatasetFormat{DatasetShareGPT, DatasetJSONL}

// Dataset is a prompt file a shape samples its requests from.
type Dataset struct {
	Path   string
	Format DatasetFormat
}

// DatasetItem is one usable prompt of a dataset.
type DatasetItem struct {
	Prompt string
	Output int // output tokens the file gives (0: none given)
	Line   int // where the entry starts in the file, 1-based
}

// Validate reports a dataset that cannot be used (a FieldError "dataset.…").
func (d Dataset) Validate() error { return first(d.problems()) }

func (d Dataset) problems() problems {
	var ps problems
	ps.check(d.Path == "", fieldErr("dataset.path", "", "must be set"))
	ps.check(d.Format != DatasetShareGPT && d.Format != DatasetJSONL, fieldErr("dataset.format", "sharegpt or jsonl", "%q is not sharegpt or jsonl", string(d.Format)))
	return ps
}

// LoadDataset reads the dataset's usable prompts. When output is 0 (the
// shape sets none), every prompt must give its output length. Errors name
// "file:line". A file read before, unchanged since (size and mtime), is
// not parsed again.
func LoadDataset(d Dataset, output int) ([]DatasetItem, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	items, err := cachedDataset(d)
	if err != nil {
		return nil, err
	}
	if output == 0 {
		for _, it := range items {
			if it.Output < 1 {
				return nil, fmt.Errorf("%s:%d: no output length (output_tokens, or a gpt turn with words), and the shape sets no output", d.Path, it.Line)
			}
		}
	}
	return items, nil
}

// datasetKey identifies one version of a dataset file.
type datasetKey struct {
	path   string
	format DatasetFormat
	size   int64
	mtime  time.Time
}

var datasetCache struct {
	sync.Mutex
	key   datasetKey
	items []DatasetItem
}

// cachedDataset parses d, or returns the last parse when it was of the same
// file version (a sweep reads the same file every run).
func cachedDataset(d Dataset) ([]DatasetItem, error) {
	f, err := userfile.Open(d.Path, "dataset file "+d.Path, MaxDatasetFile)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	key := datasetKey{d.Path, d.Format, fi.Size(), fi.ModTime()}
	datasetCache.Lock()
	defer datasetCache.Unlock()
	if datasetCache.key == key {
		return datasetCache.items, nil
	}
	var items []DatasetItem
	if d.Format == DatasetShareGPT {
		data, rerr := io.ReadAll(f)
		if rerr != nil {
			return nil, fmt.Errorf("dataset: %s: %w", d.Path, rerr)
		}
		items, err = ParseShareGPT(d.Path, data)
	} else {
		items, err = ParseDatasetJSONL(d.Path, f)
	}
	if err != nil {
		return nil, err
	}
	datasetCache.key, datasetCache.items = key, items
	return items, nil
}

// shareGPTEntry is one element of a ShareGPT file.
type shareGPTEntry struct {
	Conversations []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversations"`
}

// ParseShareGPT parses ShareGPT-style JSON (see DatasetShareGPT), named
// name in errors, and returns its usable prompts in file order. A file that
// is not a JSON list of objects, an entry whose fields have the wrong types,
// or one without any usable prompt is an error naming name:line.
func ParseShareGPT(name string, data []byte) ([]DatasetItem, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	at := func(off int64) string { return fmt.Sprintf("%s:%d", name, lineOf(data, off)) }
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", at(dec.InputOffset()), jsonErr(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("%s: a ShareGPT file is a JSON list of {conversations: [...]}, got %v", at(dec.InputOffset()-1), tok)
	}
	var out []DatasetItem
	for k := 0; dec.More(); k++ {
		start := dec.InputOffset()
		var e shareGPTEntry
		if err := dec.Decode(&e); err != nil {
			off := dec.InputOffset()
			var se *json.SyntaxError
			var te *json.UnmarshalTypeError
			switch {
			case errors.As(err, &se):
				off = se.Offset - 1 // the offending byte
			case errors.As(err, &te) && te.Field == "":
				return nil, fmt.Errorf("%s:%d: entry %d: want an object {conversations: [...]}, got %s", name, valueLine(data, start), k, te.Value)
			case errors.As(err, &te):
				// A type error's offset counts from the start of the value
				// Decode read (after the comma), not from the file's.
				return nil, fmt.Errorf("%s: entry %d: %s: want %s, got %s", at(decodeStart(data, start, k)+te.Offset-1), k, te.Field, te.Type, te.Value)
			}
			return nil, fmt.Errorf("%s: entry %d: %w", at(off), k, jsonErr(err))
		}
		prompt, outWords, ok := shareGPTPair(&e)
		if ok {
			out = append(out, DatasetItem{Prompt: prompt, Output: outWords, Line: valueLine(data, start)})
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%s: %w", at(dec.InputOffset()), jsonErr(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: data after the list", at(dec.InputOffset()))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s:1: no entry has a human turn followed by a gpt turn", name)
	}
	return out, nil
}

// shareGPTPair finds the first human turn and the first gpt turn after it.
func shareGPTPair(e *shareGPTEntry) (prompt string, outWords int, ok bool) {
	for i, c := range e.Conversations {
		if (c.From != "human" && c.From != "user") || strings.TrimSpace(c.Value) == "" {
			continue
		}
		for _, r := range e.Conversations[i+1:] {
			if r.From == "gpt" || r.From == "assistant" || r.From == "chatgpt" {
				n := len(strings.Fields(r.Value))
				return c.Value, n, n > 0
			}
		}
		return "", 0, false
	}
	return "", 0, false
}

// ParseDatasetJSONL parses a JSONL prompt file (see DatasetJSONL), named name
// in errors. Blank lines are skipped; other fields are ignored.
func ParseDatasetJSONL(name string, r io.Reader) ([]DatasetItem, error) {
	var out []DatasetItem
	err := eachLine(r, maxDatasetLine, func(line int, b []byte) error {
		it, err := parseDatasetLine(b)
		if err != nil {
			return err
		}
		it.Line = line
		out = append(out, it)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s:%w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s:1: no prompts", name)
	}
	return out, nil
}

// eachLine calls fn with every non-blank line of r (at most max bytes) and
// its 1-based number; an error, fn's or the reader's, comes back as "line:
// error".
func eachLine(r io.Reader, max int, fn func(line int, b []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		b, err := readLine(br, max)
		if len(bytes.TrimSpace(b)) > 0 && (err == nil || errors.Is(err, io.EOF)) {
			if ferr := fn(line, b); ferr != nil {
				return fmt.Errorf("%d: %w", line, ferr)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%d: %w", line, err)
		}
	}
}

func parseDatasetLine(b []byte) (DatasetItem, error) {
	var v struct {
		Prompt *string          `json:"prompt"`
		Output *json.RawMessage `json:"output_tokens"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return DatasetItem{}, fmt.Errorf("%s: want %s, got %s", te.Field, te.Type, te.Value)
		}
		return DatasetItem{}, jsonErr(err)
	}
	if dec.More() {
		return DatasetItem{}, errors.New("invalid JSON: more than one value on the line")
	}
	if v.Prompt == nil || strings.TrimSpace(*v.Prompt) == "" {
		return DatasetItem{}, errors.New("prompt: must be a non-empty string")
	}
	it := DatasetItem{Prompt: *v.Prompt}
	if v.Output != nil && string(*v.Output) != "null" {
		n, err := parseCount(*v.Output)
		if err != nil {
			return DatasetItem{}, fmt.Errorf("output_tokens: %w", err)
		}
		it.Output = n
	}
	return it, nil
}

// parseCount reads an output length: an integer in [1, maxTokens].
func parseCount(raw json.RawMessage) (int, error) {
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil || n < 1 || n > maxTokens {
		return 0, fmt.Errorf("must be an integer in [1, %d], got %s", maxTokens, raw)
	}
	return int(n), nil
}

// jsonErr words a decoding error for a file:line message.
func jsonErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("invalid JSON: the file ends inside a value")
	}
	return fmt.Errorf("invalid JSON: %w", err)
}

// lineOf is the 1-based line of byte off.
func lineOf(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return 1 + bytes.Count(data[:off], []byte{'\n'})
}

// decodeStart is where the bytes of list element k begin for
// json.Decoder.Decode, called at stream offset off after element k−1: past
// the white space and the comma that separate them (element 0: off).
func decodeStart(data []byte, off int64, k int) int64 {
	if k == 0 {
		return off
	}
	for off < int64(len(data)) && bytes.IndexByte([]byte(" \t\r\n"), data[off]) >= 0 {
		off++
	}
	if off < int64(len(data)) && data[off] == ',' {
		off++
	}
	return off
}

// valueLine is the line of the first byte at or after off that is not white
// space or a comma: where the next value of a list starts.
func valueLine(data []byte, off int64) int {
	for off >= 0 && off < int64(len(data)) && bytes.IndexByte([]byte(" \t\r\n,"), data[off]) >= 0 {
		off++
	}
	return lineOf(data, off)
}
