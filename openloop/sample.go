package openloop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// SampleOptions says how SampleTraceWith cuts a trace down.
type SampleOptions struct {
	Requests   int         // about this many requests (≥ 1)
	Seed       int64       // chooses the sessions
	Sessions   SessionMode // how requests group into sessions ("" = auto)
	CommonFrac float64     // a hash id in this share of requests is not a session mark (0 = DefaultCommonFrac)
	// KeepLines copies every line verbatim. By default a line whose session
	// was inferred from its hash chain (it has no session_id and shares the
	// chain with other lines) gets "session_id": "chain-<id>" added, so a
	// replay's max_inflight_sessions limits sessions, not requests.
	KeepLines bool
}

// SampleReport describes a sample next to the trace it came from.
type SampleReport struct {
	Requests, Sessions               int     // in the input
	SampledRequests, SampledSessions int     // in the sample
	Tagged                           int     // lines given an inferred session_id
	IdealHitRate                     float64 // infinite-cache block hit rate of the input, in file order
	SampledIdealHitRate              float64 // and of the sample
}

// SampleTraceWith writes to out a sample of whole sessions of the Mooncake
// trace read from in — the way the agentic experiments' trace sampler cuts a
// cluster trace down to one machine, so the sample keeps the trace's prefix
// reuse (docs/routing.md).
// Sessions are drawn in a seeded random order and taken until the total
// reaches o.Requests; the last one is dropped again if that lands closer to
// the target. Selected lines keep their original order. Every input line is
// validated as ParseTrace does; errors name "file:line" when in has a Name
// (an *os.File), else "trace:line".
//
// The input is read four times (candidate common ids, their counts, sessions,
// copy), in memory that grows with the sessions, not the blocks: directly when
// it is an io.ReadSeeker (a file), otherwise through a temporary file.
func SampleTraceWith(ctx context.Context, in io.Reader, out io.Writer, o SampleOptions) (SampleReport, error) {
	var rep SampleReport
	if o.Requests < 1 {
		return rep, fmt.Errorf("trace sample: requests: must be ≥ 1, got %d", o.Requests)
	}
	mode, frac, err := groupingOptions(o.Sessions, o.CommonFrac)
	if err != nil {
		return rep, fmt.Errorf("trace sample: %w", err)
	}
	name, rs, cleanup, err := seekable(in)
	if err != nil {
		return rep, err
	}
	defer cleanup()
	start, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return rep, fmt.Errorf("trace sample: %w", err)
	}
	pass := func(fn func(tr *TraceRequest, line []byte) error) error {
		if _, err := rs.Seek(start, io.SeekStart); err != nil {
			return fmt.Errorf("trace sample: %w", err)
		}
		if err := scanTrace(ctx, rs, name, fn); err != nil {
			return fmt.Errorf("trace sample: %w", err)
		}
		return nil
	}
	ss, err := findSessions(pass, mode, frac)
	if err != nil {
		return rep, err
	}
	chosen := chooseSessions(ss.keys, ss.sizes, o.Requests, o.Seed)
	// The last pass copies the chosen sessions' lines.
	bw := bufio.NewWriter(out)
	sample := &idealCache{}
	err = pass(func(tr *TraceRequest, line []byte) error {
		k, chain := ss.g.key(tr)
		if !chosen[k] {
			return nil
		}
		sample.add(tr)
		rep.SampledRequests++
		line = bytes.TrimRight(line, "\r\n")
		if chain && !o.KeepLines && ss.sizes[k] > 1 {
			line = withSessionID(line, chainSessionID(k))
			rep.Tagged++
		}
		if _, err := bw.Write(line); err != nil {
			return err
		}
		return bw.WriteByte('\n')
	})
	if err != nil {
		return rep, err
	}
	if err := bw.Flush(); err != nil {
		return rep, fmt.Errorf("trace sample: writing: %w", err)
	}
	rep.Requests, rep.Sessions, rep.SampledSessions = ss.requests, len(ss.keys), len(chosen)
	rep.IdealHitRate, rep.SampledIdealHitRate = ss.full.rate(), sample.rate()
	return rep, nil
}

// withSessionID returns the JSON object line with a session_id field added
// before its closing brace (the rest of the line kept byte for byte).
func withSessionID(line []byte, id string) []byte {
	end := bytes.LastIndexByte(line, '}')
	v, _ := json.Marshal(id) // a string always marshals
	out := make([]byte, 0, len(line)+len(v)+16)
	out = append(out, bytes.TrimRight(line[:end], " \t")...)
	out = append(out, `, "session_id": `...)
	out = append(out, v...)
	return append(out, line[end:]...)
}

// seekable returns in as a ReadSeeker with its name for errors: in itself
// when it can seek, else a temporary copy that cleanup removes.
func seekable(in io.Reader) (name string, rs io.ReadSeeker, cleanup func(), err error) {
	name, cleanup = "trace", func() {}
	if f, ok := in.(interface{ Name() string }); ok && f.Name() != "" {
		name = f.Name()
	}
	if rs, ok := in.(io.ReadSeeker); ok {
		return name, rs, cleanup, nil
	}
	tmp, err := os.CreateTemp("", "mbench-trace-*.jsonl")
	if err != nil {
		return "", nil, nil, fmt.Errorf("trace sample: %w", err)
	}
	cleanup = func() { tmp.Close(); os.Remove(tmp.Name()) }
	if _, err := io.Copy(tmp, in); err != nil {
		cleanup()
		return "", nil, nil, fmt.Errorf("trace sample: spooling input: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		cleanup()
		return "", nil, nil, fmt.Errorf("trace sample: %w", err)
	}
	return name, tmp, cleanup, nil
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

// scanTrace parses every non-blank line of r (named name in errors) and
// calls fn with it and its raw bytes.
func scanTrace(ctx context.Context, r io.Reader, name string, fn func(*TraceRequest, []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		if line%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		b, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(b)) > 0 {
			tr, perr := parseTraceLine(b, line)
			if perr != nil {
				return fmt.Errorf("%s:%d: %w", name, line, perr)
			}
			if ferr := fn(&tr, b); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", name, line, err)
		}
	}
}
