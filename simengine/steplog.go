package simengine

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"time"
)

// stepFlushEvery bounds how long a logged step may sit in the buffer.
const stepFlushEvery = 200 * time.Millisecond

// stepRecord is one engine_step.jsonl line.
type stepRecord struct {
	endWall       time.Time
	cost          stepCost
	numRunning    int
	numWaiting    int
	prefillTokens int
	decodeTokens  int
}

// stepLog appends engine_step.jsonl lines through a buffer. It is used by the
// loop goroutine only (and by Close after the loop has ended).
type stepLog struct {
	path      string
	f         *os.File
	w         *bufio.Writer
	pid       int
	buf       []byte
	lastFlush time.Time
	err       error // first write error, reported once
}

func openStepLog(path string) (*stepLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("step log: %w", err)
	}
	return &stepLog{path: path, f: f, w: bufio.NewWriterSize(f, 64<<10), pid: os.Getpid(), lastFlush: time.Now()}, nil
}

// appendUs appends a µs value rounded to the ns, with no negative zero.
func appendUs(b []byte, v float64) []byte {
	v = math.Round(v*1000) / 1000
	if v == 0 {
		v = 0
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// encode renders r as one JSON line. Connector timers are written only when
// a connector is configured: a timer that is not part of the step is absent.
func (l *stepLog) encode(r stepRecord) []byte {
	c := r.cost
	parts := c.schedule + c.execute + c.update
	if c.connector {
		parts += c.buildMeta + c.getFinished
	}
	b := append(l.buf[:0], `{"ts_us":`...)
	b = strconv.AppendInt(b, r.endWall.UnixMicro(), 10)
	for _, f := range []struct {
		k  string
		v  float64
		on bool
	}{
		{`,"step_duration_us":`, c.total, true}, {`,"schedule_us":`, c.schedule, true},
		{`,"build_meta_us":`, c.buildMeta, c.connector}, {`,"execute_us":`, c.execute, true},
		{`,"update_us":`, c.update, true}, {`,"get_finished_us":`, c.getFinished, c.connector},
		{`,"unaccounted_us":`, c.total - parts, true},
	} {
		if f.on {
			b = appendUs(append(b, f.k...), f.v)
		}
	}
	for _, kv := range []struct {
		k string
		v int
	}{
		{`,"num_running":`, r.numRunning}, {`,"num_waiting":`, r.numWaiting},
		{`,"num_prefill_tokens":`, r.prefillTokens}, {`,"num_decode_tokens":`, r.decodeTokens},
		{`,"pid":`, l.pid},
	} {
		b = append(b, kv.k...)
		b = strconv.AppendInt(b, int64(kv.v), 10)
	}
	b = append(b, "}\n"...)
	l.buf = b
	return b
}

// write appends r to the buffer.
func (l *stepLog) write(r stepRecord) error {
	if _, err := l.w.Write(l.encode(r)); err != nil {
		return l.fail(err)
	}
	return nil
}

// flushBefore flushes when buffered lines would otherwise still be unwritten
// at until, stepFlushEvery or more after the last flush. The loop calls it
// before each sleep, so no line waits longer than stepFlushEvery.
func (l *stepLog) flushBefore(until time.Time) error {
	if l.w.Buffered() > 0 && until.Sub(l.lastFlush) >= stepFlushEvery {
		return l.flush()
	}
	return nil
}

func (l *stepLog) flush() error {
	l.lastFlush = time.Now()
	if err := l.w.Flush(); err != nil {
		return l.fail(err)
	}
	return nil
}

// fail keeps the first error; only the first is returned, so the caller
// reports it once.
func (l *stepLog) fail(err error) error {
	if l.err != nil {
		return nil
	}
	l.err = fmt.Errorf("step log %s: %w", l.path, err)
	return l.err
}

func (l *stepLog) close() error {
	ferr := l.flush()
	if err := l.f.Close(); err != nil && ferr == nil {
		ferr = l.fail(err)
	}
	return ferr
}
