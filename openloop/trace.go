package openloop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/mbench/mbench/internal/userfile"
)

// TraceRequest is one line of a Mooncake-format trace:
//
//	{"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [..],
//	 "session_id"?: "...", "turn"?: k}
//
// Each hash id stands for one 512-token block of the prompt; equal ids mean
// identical blocks. Unknown fields are ignored.
type TraceRequest struct {
	Line         int     // 1-based line in the trace file
	TimestampMs  float64 // send time in the trace, ms
	InputLength  int
	OutputLength int
	HashIDs      []int64
	SessionID    string // "" = a request of its own
	Turn         int    // position in the session when HasTurn
	HasTurn      bool
}

// traceLine is the JSON form of a trace line; pointers detect absent fields.
type traceLine struct {
	Timestamp    *float64        `json:"timestamp"`
	InputLength  *int            `json:"input_length"`
	OutputLength *int            `json:"output_length"`
	HashIDs      []int64         `json:"hash_ids"`
	SessionID    json.RawMessage `json:"session_id"`
	Turn         *int            `json:"turn"`
}

// File limits: a trace or dataset larger than this, or a line of one
// longer than its limit, is refused before it is read whole (a model file
// given by mistake, a file without newlines).
const (
	MaxTraceFile   = 2 << 30
	MaxDatasetFile = 2 << 30
	maxTraceLine   = 1 << 20
	maxDatasetLine = 64 << 20
)

// LoadTrace reads and parses the trace file at path: a regular file of at
// most MaxTraceFile bytes, streamed a line at a time.
func LoadTrace(path string) ([]TraceRequest, error) {
	f, err := userfile.Open(path, "trace file "+path, MaxTraceFile)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	return ParseTrace(f, path)
}

// ParseTrace reads a Mooncake-format trace. Blank lines are skipped. A line
// that is not valid is refused with an error "name:line: field: problem".
// A session may not repeat a turn number.
func ParseTrace(r io.Reader, name string) ([]TraceRequest, error) {
	var out []TraceRequest
	type sessionTurn struct {
		session string
		turn    int
	}
	seen := map[sessionTurn]int{}
	err := eachLine(r, maxTraceLine, func(line int, b []byte) error {
		tr, err := parseTraceLine(b, line)
		if err != nil {
			return err
		}
		if tr.HasTurn && tr.SessionID != "" {
			k := sessionTurn{tr.SessionID, tr.Turn}
			if first, dup := seen[k]; dup {
				return fmt.Errorf("turn: session %q repeats turn %d (first at line %d)", tr.SessionID, tr.Turn, first)
			}
			seen[k] = line
		}
		out = append(out, tr)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s:%w", name, err)
	}
	return out, nil
}

// parseTraceLine parses and validates one non-blank trace line; its error
// reads "field: problem".
func parseTraceLine(b []byte, line int) (TraceRequest, error) {
	tr := TraceRequest{Line: line}
	fail := func(field, format string, args ...any) (TraceRequest, error) {
		return tr, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
	}
	var tl traceLine
	if err := json.Unmarshal(b, &tl); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return fail(te.Field, "want %s, got %s", te.Type, te.Value)
		}
		return fail("json", "%v", err)
	}
	switch {
	case tl.Timestamp == nil:
		return fail("timestamp", "missing (ms since the trace's start)")
	case *tl.Timestamp < 0 || math.IsInf(*tl.Timestamp, 0):
		return fail("timestamp", "must be a finite number ≥ 0, got %v", *tl.Timestamp)
	case tl.InputLength == nil:
		return fail("input_length", "missing (prompt tokens)")
	case *tl.InputLength < 1 || *tl.InputLength > maxTokens:
		return fail("input_length", "must be in [1, %d], got %d", maxTokens, *tl.InputLength)
	case tl.OutputLength == nil:
		return fail("output_length", "missing (completion tokens)")
	case *tl.OutputLength < 1 || *tl.OutputLength > maxTokens:
		return fail("output_length", "must be in [1, %d], got %d", maxTokens, *tl.OutputLength)
	}
	tr.TimestampMs = *tl.Timestamp
	tr.InputLength = *tl.InputLength
	tr.OutputLength = *tl.OutputLength
	if need := (tr.InputLength + TraceBlockTokens - 1) / TraceBlockTokens; len(tl.HashIDs) > need {
		return fail("hash_ids", "%d blocks, but input_length %d needs at most %d blocks of %d tokens", len(tl.HashIDs), tr.InputLength, need, TraceBlockTokens)
	}
	tr.HashIDs = tl.HashIDs
	sid, err := sessionString(tl.SessionID)
	if err != nil {
		return fail("session_id", "%v", err)
	}
	tr.SessionID = sid
	if tl.Turn != nil {
		if *tl.Turn < 0 {
			return fail("turn", "must be ≥ 0, got %d", *tl.Turn)
		}
		tr.Turn, tr.HasTurn = *tl.Turn, true
	}
	return tr, nil
}

// sessionString accepts a session id given as a JSON string or integer.
func sessionString(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	}
	if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
		return "", fmt.Errorf("want a string or an integer, got %.40s", raw)
	}
	return string(raw), nil
}

// sessionKey is the key that groups a request with its session: its session
// id, or a key of its own when it has none.
func (t *TraceRequest) sessionKey() string {
	if t.SessionID != "" {
		return "s:" + t.SessionID
	}
	return "line:" + strconv.Itoa(t.Line)
}

// readLine reads one line (its newline included) of at most max bytes; a
// longer one is an error, so that a file without newlines is not read whole
// into memory.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var b []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(b)+len(frag) > max {
			return nil, fmt.Errorf("line longer than %s: is this the right file?", userfile.Size(int64(max)))
		}
		b = append(b, frag...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return b, err
		}
	}
}
