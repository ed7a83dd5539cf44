package probes

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The step log's binary records (written by the vLLM plugin's engine
// process; mbench_vllm/steplog.py is the writer's side of this layout).
// A record is an 8-byte header and a payload of little-endian int64s:
//
//	byte 0     0xFF (never starts a JSON text line: not UTF-8)
//	byte 1     kind: 'S' step record, 'G' GPU record
//	bytes 2-3  u16 version (1)
//	bytes 4-7  u32 payload length in bytes, a multiple of 8
//
// A reader takes the fields it knows and skips the rest, so a later version
// may append fields. Anything else in the file is a JSON text line (status
// lines, and every line of a JSONL log), ending at a newline.
const (
	recMark      = 0xFF
	recKindStep  = 'S'
	recKindGPU   = 'G'
	recHeader    = 8
	maxRecSlots  = 64 // a longer payload is malformed
	stepRecSlots = 17 // payload slots of a version-1 step record
	gpuRecSlots  = 4
)

// Payload slots of a step record.
const (
	slotTs = iota
	slotDur
	slotSched
	slotMeta
	slotExec
	slotUpd
	slotGF
	slotLaunch
	slotWait
	slotGPU
	slotBatch
	slotRunning
	slotWaiting
	slotTotal
	slotDecode
	slotFlags
	slotPID
)

// Flags of a step record: the path, whether its GPU time is host-bound
// (FieldGPUHostBound), and (bits 8-11) the timers whose hooks the engine
// applied; a timer whose bit is clear is absent. A GPU record's optional
// fifth slot holds the host-bound bit alike.
const (
	flagBatchQueue = 1
	flagGPUHost    = 2
	hookedSched    = 1 << 8
	hookedExec     = 2 << 8
	hookedUpd      = 4 << 8
	hookedLaunch   = 8 << 8
)

// record kinds returned by recordReader.next.
const (
	kindText = iota
	kindStep
	kindGPU
)

// errMalformedRecord wraps every problem with a binary record.
var errMalformedRecord = errors.New("malformed binary record")

// validHeader reports whether b (at least recHeader bytes) starts a record
// this reader can take: its payload length in bytes, or -1.
func validHeader(b []byte) int {
	if b[0] != recMark || (b[1] != recKindStep && b[1] != recKindGPU) {
		return -1
	}
	if binary.LittleEndian.Uint16(b[2:]) < 1 {
		return -1
	}
	n := binary.LittleEndian.Uint32(b[4:])
	min := uint32(stepRecSlots * 8)
	if b[1] == recKindGPU {
		min = gpuRecSlots * 8
	}
	if n%8 != 0 || n < min || n > maxRecSlots*8 {
		return -1
	}
	return int(n)
}

// recordReader yields the records of a step log — JSON text lines and
// binary records, in any mix — reusing its buffers. Bytes that are neither
// (a truncated or corrupt record, a fetch that began inside one) are
// skipped up to the next record or line start and reported once.
type recordReader struct {
	r        io.Reader
	buf      []byte
	lo, hi   int
	eof      bool
	err      error
	long     []byte
	slots    [maxRecSlots]int64
	nslots   int
	consumed int64 // bytes before buf[lo]
}

func newRecordReader(r io.Reader) *recordReader {
	return &recordReader{r: r, buf: make([]byte, readBufSize)}
}

// fill moves the unread bytes to the front and reads more; false when
// nothing more can come (EOF or an error, kept in rr.err).
func (rr *recordReader) fill() bool {
	if rr.eof {
		return false
	}
	if rr.lo > 0 {
		n := copy(rr.buf, rr.buf[rr.lo:rr.hi])
		rr.consumed += int64(rr.lo)
		rr.lo, rr.hi = 0, n
	}
	if rr.hi == len(rr.buf) {
		return false
	}
	for tries := 0; tries < 100; tries++ {
		n, err := rr.r.Read(rr.buf[rr.hi:])
		rr.hi += n
		if err != nil {
			rr.eof = true
			if !errors.Is(err, io.EOF) {
				rr.err = err
			}
			return n > 0
		}
		if n > 0 {
			return true
		}
	}
	rr.eof, rr.err = true, io.ErrNoProgress
	return false
}

// next returns the next record: a text line (without its newline, valid
// until the following call; tooLong when it exceeded maxLineSize and was
// truncated) or a binary record (its slots in rr.slots[:rr.nslots]). A
// malformed binary record or a skipped span comes back as an error
// wrapping errMalformedRecord; io.EOF at the end.
func (rr *recordReader) next() (kind int, line []byte, tooLong bool, err error) {
	for {
		b := rr.buf[rr.lo:rr.hi]
		if len(b) == 0 {
			if !rr.fill() {
				if rr.err != nil {
					return 0, nil, false, rr.err
				}
				return 0, nil, false, io.EOF
			}
			continue
		}
		if b[0] == recMark {
			if len(b) < recHeader && rr.fill() {
				continue
			}
			if len(b) < recHeader {
				rr.lo = rr.hi
				return 0, nil, false, fmt.Errorf("%w: truncated header at end of log", errMalformedRecord)
			}
			n := validHeader(b)
			if n < 0 {
				off := rr.consumed + int64(rr.lo)
				rr.resync()
				return 0, nil, false, fmt.Errorf("%w: bad header at byte %d (% x)", errMalformedRecord, off, b[:recHeader])
			}
			if len(b) < recHeader+n {
				if rr.fill() {
					continue
				}
				rr.lo = rr.hi
				return 0, nil, false, fmt.Errorf("%w: truncated at end of log (%d of %d bytes)", errMalformedRecord, len(b), recHeader+n)
			}
			rr.nslots = n / 8
			p := b[recHeader : recHeader+n]
			for i := range rr.nslots {
				rr.slots[i] = int64(binary.LittleEndian.Uint64(p[8*i:]))
			}
			rr.lo += recHeader + n
			if b[1] == recKindGPU {
				return kindGPU, nil, false, nil
			}
			return kindStep, nil, false, nil
		}
		// A text line ends at a newline, or before a 0xFF (never in JSON).
		nl := bytes.IndexByte(b, '\n')
		end := nl
		if end < 0 {
			end = len(b)
		}
		if k := bytes.IndexByte(b[:end], recMark); k >= 0 {
			line, rr.lo = b[:k], rr.lo+k
			return kindText, line, false, nil
		}
		if nl >= 0 {
			rr.lo += nl + 1
			return kindText, b[:nl], false, nil
		}
		if rr.lo > 0 && rr.fill() {
			continue
		}
		if !rr.eof && rr.hi < len(rr.buf) && rr.fill() {
			continue
		}
		if rr.eof {
			rr.lo = rr.hi
			return kindText, b, false, nil
		}
		return rr.longLine()
	}
}

// longLine reads a text line longer than the buffer, keeping at most
// maxLineSize bytes of it.
func (rr *recordReader) longLine() (int, []byte, bool, error) {
	rr.long = append(rr.long[:0], rr.buf[rr.lo:rr.hi]...)
	rr.lo = rr.hi
	tooLong := false
	for rr.fill() {
		b := rr.buf[rr.lo:rr.hi]
		end := bytes.IndexByte(b, '\n')
		stop := end
		if stop < 0 {
			stop = len(b)
		}
		if k := bytes.IndexByte(b[:stop], recMark); k >= 0 {
			end, stop = k, k
		}
		if len(rr.long) < maxLineSize {
			rr.long = append(rr.long, b[:stop]...)
		} else {
			tooLong = true
		}
		if end >= 0 {
			rr.lo += end
			if end < len(b) && b[end] == '\n' {
				rr.lo++
			}
			return kindText, rr.long, tooLong, nil
		}
		rr.lo = rr.hi
	}
	if rr.err != nil {
		return 0, nil, false, rr.err
	}
	return kindText, rr.long, tooLong, nil
}

// resync skips from a bad record header to the next valid header or the
// start of a JSON line ('{' after a newline).
func (rr *recordReader) resync() {
	rr.lo++
	for {
		b := rr.buf[rr.lo:rr.hi]
		for i := 0; i < len(b); i++ {
			c := b[i]
			if c == recMark {
				if len(b)-i < recHeader {
					rr.lo += i
					if !rr.fill() {
						rr.lo = rr.hi // a partial header at the end: part of the bad span
						return
					}
					b = rr.buf[rr.lo:rr.hi]
					i = -1
					continue
				}
				if validHeader(b[i:]) >= 0 {
					rr.lo += i
					return
				}
			} else if c == '\n' && i+1 < len(b) && b[i+1] == '{' {
				rr.lo += i + 1
				return
			}
		}
		rr.lo = rr.hi
		if !rr.fill() {
			return
		}
	}
}

// stepFromSlots fills rec from the slots of a binary step record, with the
// fields and meaning of a JSONL step line (timers in µs; unaccounted_us
// derived the same way).
func stepFromSlots(v []int64, rec *StepRecord) {
	rec.TsUs, rec.Has = v[slotTs], 0
	set := func(f int, x float64) {
		rec.Values[f] = x
		rec.Has |= 1 << uint(f)
	}
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	flags := v[slotFlags]
	bq := flags&flagBatchQueue != 0
	dur := v[slotDur]
	set(FieldStepDuration, us(dur))
	acc := int64(0)
	if v[slotSched] != 0 && flags&hookedSched != 0 {
		set(FieldSchedule, us(v[slotSched]))
		acc = v[slotSched]
	}
	if v[slotMeta] != 0 {
		set(FieldBuildMeta, us(v[slotMeta]))
	}
	if bq {
		if flags&hookedLaunch != 0 {
			if v[slotLaunch] != 0 {
				set(FieldLaunch, us(v[slotLaunch]))
				acc += v[slotLaunch]
			}
			if v[slotWait] != 0 {
				set(FieldWait, us(v[slotWait]))
				acc += v[slotWait]
			}
		}
		set(FieldBatchQueue, 1)
	} else if v[slotExec] != 0 && flags&hookedExec != 0 {
		set(FieldExecute, us(v[slotExec]))
		acc += v[slotExec]
	}
	if v[slotUpd] != 0 && flags&hookedUpd != 0 {
		set(FieldUpdate, us(v[slotUpd]))
		acc += v[slotUpd]
	}
	if v[slotGF] != 0 {
		set(FieldGetFinished, us(v[slotGF]))
	}
	set(FieldUnaccounted, us(dur-acc))
	if v[slotGPU] != 0 {
		set(FieldGPU, us(v[slotGPU]))
		if flags&flagGPUHost != 0 {
			set(FieldGPUHostBound, 1)
		}
	}
	if v[slotBatch] != 0 {
		set(FieldBatch, float64(v[slotBatch]))
	}
	if v[slotRunning] >= 0 {
		set(FieldNumRunning, float64(v[slotRunning]))
		set(FieldNumWaiting, float64(v[slotWaiting]))
	}
	if v[slotTotal] >= 0 {
		dec := max(v[slotDecode], 0)
		set(FieldNumPrefillTokens, float64(v[slotTotal]-dec))
		set(FieldNumDecodeTokens, float64(dec))
	}
	set(FieldPID, float64(v[slotPID]))
}

// gpuFromSlots fills rec from a binary GPU record (a GPU line: gpu_us and
// gpu_batch, no step_duration_us).
func gpuFromSlots(v []int64, rec *StepRecord) {
	rec.TsUs, rec.Has = v[0], 0
	rec.Values[FieldGPU] = float64(v[2]) / 1e3
	rec.Values[FieldPID] = float64(v[3])
	rec.Has = 1<<FieldGPU | 1<<FieldPID
	if v[1] != 0 {
		rec.Values[FieldGPUBatch] = float64(v[1])
		rec.Has |= 1 << FieldGPUBatch
	}
	if len(v) > 4 && v[4]&flagGPUHost != 0 {
		rec.Values[FieldGPUHostBound] = 1
		rec.Has |= 1 << FieldGPUHostBound
	}
}

// jsonKeyOrder is the key order of the plugin's JSONL step lines.
var jsonKeyOrder = [...]int{
	FieldStepDuration, FieldSchedule, FieldBuildMeta, FieldLaunch, FieldWait, FieldExecute,
	FieldUpdate, FieldGetFinished, FieldUnaccounted, FieldGPU, FieldGPUHostBound, FieldGPUBatch, FieldBatch,
	FieldNumRunning, FieldNumWaiting, FieldNumPrefillTokens, FieldNumDecodeTokens,
	FieldBatchQueue, FieldPID,
}

// AppendStepJSON appends rec as a JSONL step line (or GPU line), without a
// newline: the text form of a binary record.
func AppendStepJSON(dst []byte, rec *StepRecord) []byte {
	dst = append(dst, `{"ts_us":`...)
	dst = strconv.AppendInt(dst, rec.TsUs, 10)
	for _, f := range jsonKeyOrder {
		v, ok := rec.Get(f)
		if !ok {
			continue
		}
		dst = append(dst, ',', '"')
		dst = append(dst, FieldNames[f]...)
		dst = append(dst, '"', ':')
		if v == float64(int64(v)) && (f >= FieldNumRunning || f == FieldGPUBatch || f == FieldBatch) {
			dst = strconv.AppendInt(dst, int64(v), 10)
		} else {
			dst = strconv.AppendFloat(dst, v, 'f', -1, 64)
		}
	}
	return append(dst, '}')
}

// recordOf fills rec from the binary record rr just returned.
func (rr *recordReader) recordOf(kind int, rec *StepRecord) {
	if kind == kindGPU {
		gpuFromSlots(rr.slots[:rr.nslots], rec)
		return
	}
	stepFromSlots(rr.slots[:rr.nslots], rec)
}

// LastStepEndUs returns ts_us of the last complete record of a step log's
// tail (either format; a tail that begins or ends inside a record skips
// that part), and whether there was one.
func LastStepEndUs(tail []byte) (int64, bool) {
	rr := newRecordReader(bytes.NewReader(tail))
	var rec StepRecord
	var ts int64
	found := false
	for {
		kind, line, tooLong, err := rr.next()
		if errors.Is(err, io.EOF) {
			return ts, found
		}
		if err != nil || tooLong {
			continue
		}
		switch kind {
		case kindText:
			if parseFields(nil, line, &rec) == nil {
				ts, found = rec.TsUs, true
			}
		default:
			rr.recordOf(kind, &rec)
			ts, found = rec.TsUs, true
		}
	}
}
