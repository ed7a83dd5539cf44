package probes

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Field indexes of one engine_step.jsonl line. The first NumTimers are the
// step timers summarized by SummarizeSteps, in TimerNames order.
const (
	FieldStepDuration = iota
	FieldSchedule
	FieldBuildMeta
	FieldExecute
	FieldUpdate
	FieldGetFinished
	FieldLaunch // batch-queue path: executor execute_model/sample_tokens calls
	FieldWait   // batch-queue path: the engine thread blocked on a batch's result
	FieldUnaccounted
	// FieldGPU is the GPU time of the line's batch, measured with CUDA events
	// around the model forward: absent where it was not measured.
	FieldGPU
	FieldNumRunning
	FieldNumWaiting
	FieldNumPrefillTokens
	FieldNumDecodeTokens
	FieldPID
	FieldBatchQueue // 1 on lines of step_with_batch_queue (async scheduling, PP)
	// FieldBatch identifies the batch a line's update_us, wait_us and gpu_us
	// belong to (the batch collected in that step).
	FieldBatch
	// FieldGPUBatch names the batch of a GPU record written on a line of
	// its own (a "gpu line": gpu_us without step_duration_us), when the
	// batch's events completed after its step line was written.
	FieldGPUBatch
	// FieldGPUHostBound is 1 on a line whose gpu_us is host-bound: the GPU
	// reached the forward's start event before the host had launched the
	// forward, and the launch took more than 5% of the events' span, so the
	// span holds host time — an upper bound of the forward's GPU time, not
	// the GPU time. SummarizeSteps leaves such spans out of gpu_us.
	FieldGPUHostBound
	numFields
)

// NumTimers is the number of step timers (the first fields).
const NumTimers = FieldGPU + 1

// FieldNames are the JSON names of the fields, indexed by the Field* constants.
var FieldNames = [numFields]string{
	"step_duration_us", "schedule_us", "build_meta_us", "execute_us", "update_us",
	"get_finished_us", "launch_us", "wait_us", "unaccounted_us", "gpu_us", "num_running",
	"num_waiting", "num_prefill_tokens", "num_decode_tokens", "pid", "batch_queue", "batch",
	"gpu_batch", "gpu_host_bound",
}

// TimerNames are the timers summarized per step, in a stable order.
var TimerNames = FieldNames[:NumTimers]

// StepRecord is one engine_step.jsonl line. A field that the line does not
// carry (or carries as null) is absent: its bit in Has is clear and its value
// is 0. Absent is not the same as measured zero.
type StepRecord struct {
	TsUs   int64              // step end, wall clock µs since the Unix epoch
	Values [numFields]float64 // indexed by the Field* constants
	Has    uint32             // bit i set when Values[i] was present
}

// Get returns field i and whether the line carried it.
func (r *StepRecord) Get(i int) (float64, bool) {
	return r.Values[i], r.Has&(1<<uint(i)) != 0
}

// fieldIndex maps a JSON key to a field; -1 for ts_us, -2 for unknown keys.
// The switch on string(key) does not allocate.
func fieldIndex(key []byte) int {
	switch string(key) {
	case "ts_us":
		return -1
	case "step_duration_us":
		return FieldStepDuration
	case "schedule_us":
		return FieldSchedule
	case "build_meta_us":
		return FieldBuildMeta
	case "execute_us":
		return FieldExecute
	case "update_us":
		return FieldUpdate
	case "get_finished_us":
		return FieldGetFinished
	case "launch_us":
		return FieldLaunch
	case "wait_us":
		return FieldWait
	case "batch_queue":
		return FieldBatchQueue
	case "unaccounted_us":
		return FieldUnaccounted
	case "gpu_us":
		return FieldGPU
	case "batch":
		return FieldBatch
	case "gpu_batch":
		return FieldGPUBatch
	case "gpu_host_bound":
		return FieldGPUHostBound
	case "num_running":
		return FieldNumRunning
	case "num_waiting":
		return FieldNumWaiting
	case "num_prefill_tokens":
		return FieldNumPrefillTokens
	case "num_decode_tokens":
		return FieldNumDecodeTokens
	case "pid":
		return FieldPID
	}
	return -2
}

var (
	errNotObject = errors.New("not a JSON object")
	// errNoStepDuration marks a valid line without step_duration_us: a
	// status or GPU line where SummarizeSteps accepts those, else malformed.
	errNoStepDuration = errors.New("missing step_duration_us")
)

// ParseStepLine parses one engine_step.jsonl line (without its newline) into
// rec. Unknown fields are ignored. It returns an error naming the problem
// when the line is not a JSON object, a known field is not a number, or
// ts_us or step_duration_us is missing. A hand-rolled scanner handles the
// common shape; anything unusual (escapes, nested values) goes through
// encoding/json, with the same result.
func ParseStepLine(line []byte, rec *StepRecord) error {
	return (*stepParser)(nil).parse(line, rec)
}

// stepParser remembers the key order of the previous line: loggers write
// their keys in a fixed order, so the next key is usually checked with one
// comparison instead of a scan and a lookup. A nil *stepParser learns
// nothing; the result never depends on the guesses.
type stepParser struct {
	order [28]uint8 // key k of the last line: field index + 2; 0 = unknown
	// skip marks fields whose values the caller does not read: they are
	// validated (the line must still be valid) but not converted.
	skip uint32
	// The template of scanTemplate: the last line's keys, all known.
	pats  [maxTemplateKeys]tmplKey
	slots [maxTemplateKeys]tmplSlot // the template's key order, for widening
	nkeys int
}

// parse is ParseStepLine with the parser's key-order memory.
func (p *stepParser) parse(line []byte, rec *StepRecord) error {
	if err := parseFields(p, line, rec); err != nil {
		return err
	}
	if rec.Has&(1<<FieldStepDuration) == 0 {
		return errNoStepDuration
	}
	return nil
}

// parseFields parses the known fields of a JSON object line and requires
// ts_us only.
func parseFields(p *stepParser, line []byte, rec *StepRecord) error {
	if p == nil {
		*rec = StepRecord{}
	} else { // SummarizeSteps reads Values only where Has is set
		rec.TsUs, rec.Has = 0, 0
	}
	var tsSet bool
	ok := p.scanTemplate(line, rec, &tsSet)
	if !ok {
		rec.TsUs, rec.Has, tsSet = 0, 0, false
		ok = scanFast(p, line, rec, &tsSet)
	}
	if !ok {
		*rec = StepRecord{}
		tsSet = false
		if err := parseSlow(line, rec, &tsSet); err != nil {
			return err
		}
	}
	if !tsSet {
		return errors.New("missing ts_us")
	}
	return nil
}

// setField stores a numeric token for key index idx (or ts_us).
func setField(rec *StepRecord, tsSet *bool, idx int, tok []byte) bool {
	f, iv, isInt, ok := numValue(tok)
	if !ok {
		return false
	}
	if idx == -1 {
		if !isInt {
			// numValue takes up to 18 digits as an integer; ts_us is an
			// int64 (a binary record's copy can hold any), so a longer
			// integer is read exactly, not through a float.
			if v, err := strconv.ParseInt(string(tok), 10, 64); err == nil {
				rec.TsUs, *tsSet = v, true
				return true
			}
			if math.IsNaN(f) || f < -9.2e18 || f > 9.2e18 {
				return false
			}
			iv = int64(math.Floor(f))
		}
		rec.TsUs, *tsSet = iv, true
		return true
	}
	rec.Values[idx] = f
	rec.Has |= 1 << uint(idx)
	return true
}

// clearField records an explicit null: the field is absent.
func clearField(rec *StepRecord, tsSet *bool, idx int) {
	if idx == -1 {
		rec.TsUs, *tsSet = 0, false
		return
	}
	rec.Values[idx] = 0
	rec.Has &^= 1 << uint(idx)
}

// parseSlow is the encoding/json path, with the fast path's semantics:
// exact key match, last duplicate wins, null means absent.
func parseSlow(line []byte, rec *StepRecord, tsSet *bool) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return err
	}
	if m == nil {
		return errNotObject
	}
	for k, raw := range m {
		idx := fieldIndex([]byte(k))
		if idx == -2 {
			continue
		}
		if string(raw) == "null" {
			clearField(rec, tsSet, idx)
			continue
		}
		if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) ||
			!setField(rec, tsSet, idx, raw) {
			return fmt.Errorf("field %s: not a number: %.40s", k, raw)
		}
	}
	return nil
}
