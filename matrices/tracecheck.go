package matrices

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
)

// Trace limits, as the load generator applies them.
const (
	traceBlockTokens = 512     // tokens behind one hash id
	traceMaxTokens   = 4 << 20 // longest input_length / output_length
)

// traceRecord is the JSON form of one trace line; pointers detect absent
// fields.
type traceRecord struct {
	Timestamp    *float64        `json:"timestamp"`
	InputLength  *int            `json:"input_length"`
	OutputLength *int            `json:"output_length"`
	HashIDs      []int64         `json:"hash_ids"`
	SessionID    json.RawMessage `json:"session_id"`
	Turn         *int            `json:"turn"`
}

// checkTraceFile reads the Mooncake-format trace at path and reports its
// first line the load generator would refuse, so that `mbench validate` and
// `mbench run` refuse a bad trace before any engine launches. The rules are
// those of openloop.ParseTrace, which checks again when a run starts.
func checkTraceFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return checkTrace(f, path)
}

// checkTrace is checkTraceFile on a reader; errors read "name:line: field:
// problem". A trace without a request is refused too.
func checkTrace(r io.Reader, name string) error {
	type sessionTurn struct {
		session string
		turn    int
	}
	seen := map[sessionTurn]int{}
	br := bufio.NewReaderSize(r, 64<<10)
	requests := 0
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(b)) > 0 {
			requests++
			session, turn, field, msg := checkTraceLine(b)
			if msg == "" && session != "" && turn >= 0 {
				k := sessionTurn{session, turn}
				if first, dup := seen[k]; dup {
					field, msg = "turn", fmt.Sprintf("session %q repeats turn %d (first at line %d)", session, turn, first)
				}
				seen[k] = line
			}
			if msg != "" {
				return fmt.Errorf("%s:%d: %s: %s", name, line, field, msg)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", name, line, err)
		}
	}
	if requests == 0 {
		return fmt.Errorf("%s: no requests (want one JSON object per line)", name)
	}
	return nil
}

// checkTraceLine validates one non-blank line; msg is empty when it is good.
// turn is -1 when the line has none.
func checkTraceLine(b []byte) (session string, turn int, field, msg string) {
	turn = -1
	var tr traceRecord
	if err := json.Unmarshal(b, &tr); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return "", turn, te.Field, fmt.Sprintf("want %s, got %s", te.Type, te.Value)
		}
		return "", turn, "json", err.Error()
	}
	length := func(v *int, what string) string {
		switch {
		case v == nil:
			return "missing (" + what + ")"
		case *v < 1 || *v > traceMaxTokens:
			return fmt.Sprintf("must be in [1, %d], got %d", traceMaxTokens, *v)
		}
		return ""
	}
	switch {
	case tr.Timestamp == nil:
		return "", turn, "timestamp", "missing (ms since the trace's start)"
	case *tr.Timestamp < 0 || math.IsInf(*tr.Timestamp, 0):
		return "", turn, "timestamp", fmt.Sprintf("must be a finite number ≥ 0, got %v", *tr.Timestamp)
	}
	if m := length(tr.InputLength, "prompt tokens"); m != "" {
		return "", turn, "input_length", m
	}
	if m := length(tr.OutputLength, "completion tokens"); m != "" {
		return "", turn, "output_length", m
	}
	if need := (*tr.InputLength + traceBlockTokens - 1) / traceBlockTokens; len(tr.HashIDs) > need {
		return "", turn, "hash_ids", fmt.Sprintf("%d blocks, but input_length %d needs at most %d blocks of %d tokens",
			len(tr.HashIDs), *tr.InputLength, need, traceBlockTokens)
	}
	if raw := bytes.TrimSpace(tr.SessionID); len(raw) > 0 && string(raw) != "null" {
		if raw[0] == '"' {
			if err := json.Unmarshal(raw, &session); err != nil {
				return "", turn, "session_id", err.Error()
			}
		} else if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
			return "", turn, "session_id", fmt.Sprintf("want a string or an integer, got %.40s", raw)
		} else {
			session = string(raw)
		}
	}
	if tr.Turn != nil {
		if *tr.Turn < 0 {
			return "", turn, "turn", fmt.Sprintf("must be ≥ 0, got %d", *tr.Turn)
		}
		turn = *tr.Turn
	}
	return session, turn, "", ""
}
