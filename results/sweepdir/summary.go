package sweepdir

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mbench/mbench/internal/durable"
	"github.com/mbench/mbench/results"
)

// ReadRunSummary reads a run's summary_A.json.
func ReadRunSummary(path string) (*results.RunSummary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read run summary: %w", err)
	}
	s, err := parseRunSummary(b)
	if err != nil {
		return nil, fmt.Errorf("parse run summary %s: %w", path, err)
	}
	return s, nil
}

// parseRunSummary decodes a summary_A.json.
func parseRunSummary(b []byte) (*results.RunSummary, error) {
	var s results.RunSummary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// WriteRunSummary writes a run's summary_A.json atomically, indented, with
// "<" and ">" left readable.
func WriteRunSummary(path string, s *results.RunSummary) error {
	b, err := EncodeJSON(s)
	if err != nil {
		return fmt.Errorf("encode run summary %s: %w", path, err)
	}
	return durable.WriteFile(path, b, 0o644)
}

// EncodeJSON encodes v as every summary file of a sweep is written:
// indented by two spaces, without HTML escaping, with a final newline.
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteCapacity writes rep to path (a sweep's capacity.json), atomically.
func WriteCapacity(path string, rep *results.CapacityReport) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", results.CapacityFile, err)
	}
	return durable.WriteFile(path, append(data, '\n'), 0o644)
}

// ReadCapacity reads dir/capacity.json; os.ErrNotExist (wrapped) when the
// sweep is not a capacity search.
func ReadCapacity(dir string) (*results.CapacityReport, error) {
	data, err := os.ReadFile(filepath.Join(dir, results.CapacityFile))
	if err != nil {
		return nil, err
	}
	var rep results.CapacityReport
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, results.CapacityFile), err)
	}
	return &rep, nil
}

// WriteFile writes data to rel under dir atomically, making the folders
// it lies in.
func WriteFile(dir, rel string, data []byte) error {
	path := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return durable.WriteFile(path, data, 0o644)
}
