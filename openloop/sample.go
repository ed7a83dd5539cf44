package openloop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// SampleTrace writes to out a sample of whole sessions of the Mooncake trace
// read from in, about requests requests in all, chosen by seed — the way seed
// 003's sample_trace.py cuts a cluster trace down to one machine. Sessions
// are drawn in a seeded random order and taken until the total reaches
// requests; the last one is dropped again if that lands closer to the target.
// A request without a session_id is a session of its own. Selected lines are
// copied verbatim, in their original order. Every input line is validated as
// ParseTrace does; errors name "file:line" when in has a Name (an *os.File),
// else "trace:line".
//
// The input is read twice: directly when it is an io.ReadSeeker (a file),
// otherwise through a temporary file.
func SampleTrace(ctx context.Context, in io.Reader, out io.Writer, requests int, seed int64) error {
	if requests < 1 {
		return fmt.Errorf("trace sample: requests: must be ≥ 1, got %d", requests)
	}
	name := "trace"
	if f, ok := in.(interface{ Name() string }); ok && f.Name() != "" {
		name = f.Name()
	}
	rs, ok := in.(io.ReadSeeker)
	if !ok {
		tmp, err := os.CreateTemp("", "mbench-trace-*.jsonl")
		if err != nil {
			return fmt.Errorf("trace sample: %w", err)
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		if _, err := io.Copy(tmp, in); err != nil {
			return fmt.Errorf("trace sample: spooling input: %w", err)
		}
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("trace sample: %w", err)
		}
		rs = tmp
	}
	start, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("trace sample: %w", err)
	}
	// Pass 1: session sizes, in order of first appearance.
	var keys []string
	sizes := map[string]int{}
	err = eachTraceLine(ctx, rs, name, func(tr *TraceRequest, _ []byte) error {
		k := tr.sessionKey()
		if _, seen := sizes[k]; !seen {
			keys = append(keys, k)
		}
		sizes[k]++
		return nil
	})
	if err != nil {
		return err
	}
	chosen := chooseSessions(keys, sizes, requests, seed)
	// Pass 2: copy the chosen sessions' lines.
	if _, err := rs.Seek(start, io.SeekStart); err != nil {
		return fmt.Errorf("trace sample: %w", err)
	}
	bw := bufio.NewWriter(out)
	err = eachTraceLine(ctx, rs, name, func(tr *TraceRequest, line []byte) error {
		if !chosen[tr.sessionKey()] {
			return nil
		}
		if _, err := bw.Write(bytes.TrimRight(line, "\r\n")); err != nil {
			return err
		}
		return bw.WriteByte('\n')
	})
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("trace sample: writing: %w", err)
	}
	return nil
}

// chooseSessions draws sessions in a seeded random order until their requests
// reach target, dropping the last one when that is closer to target.
func chooseSessions(keys []string, sizes map[string]int, target int, seed int64) map[string]bool {
	r := streamRNG(seed, saltSampleSes, 0)
	perm := r.Perm(len(keys))
	chosen := map[string]bool{}
	total := 0
	for _, pi := range perm {
		k := keys[pi]
		n := sizes[k]
		if total+n >= target {
			if total == 0 || total+n-target <= target-total {
				chosen[k] = true
			}
			break
		}
		chosen[k] = true
		total += n
	}
	return chosen
}

// eachTraceLine parses every non-blank line of r (named name in errors) and
// calls fn with it and its raw bytes.
func eachTraceLine(ctx context.Context, r io.Reader, name string, fn func(*TraceRequest, []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		if line%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		b, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(b)) > 0 {
			tr, perr := parseTraceLine(b, name, line)
			if perr != nil {
				return fmt.Errorf("trace sample: %w", perr)
			}
			if ferr := fn(&tr, b); ferr != nil {
				return fmt.Errorf("trace sample: %w", ferr)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("trace sample: %s:%d: %w", name, line, err)
		}
	}
}
