package openloop

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func sampleRecord() Record {
	return Record{ID: 7, Cell: "c\"1\\\n\x01é\xff", Block: 2, Phase: PhaseMeasure, ScheduledNs: 100, SentNs: 120,
		FirstTokenNs: 5000, LastTokenNs: 9000, DoneNs: 9100, InputTokens: 4096, OutputTokens: 3,
		ITLMs: []float64{1.5, 2.000123, 1e-6}, Status: StatusError, Error: "HTTP 503: <busy>", HTTPStatus: 503,
		Target: "http://127.0.0.1:1", Session: "s1", Turn: 2, PrefixGroup: 3, TraceNs: 77, UsageMissing: true, MaxTokens: 9,
		CachedTokens: new(int)}
}

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	for _, r := range []Record{sampleRecord(), {Phase: PhaseWarmup, Status: StatusOK}} {
		mine := r.AppendJSON(nil)
		std, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		var a, b map[string]any
		if err := json.Unmarshal(mine, &a); err != nil {
			t.Fatalf("AppendJSON output is not JSON: %v\n%s", err, mine)
		}
		_ = json.Unmarshal(std, &b)
		if b["itl_ms"] == nil {
			b["itl_ms"] = []any{} // nil slice: AppendJSON writes [], encoding/json null
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("AppendJSON\n%s\nencoding/json\n%s", mine, std)
		}
	}
}

// TestAppendJSONEveryField: a record with every field set (by reflection,
// so that a field added later is covered too) is written as encoding/json
// writes it.
func TestAppendJSONEveryField(t *testing.T) {
	var r Record
	v := reflect.ValueOf(&r).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x" + strconv.Itoa(i))
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]float64{float64(i) + 0.5}))
		case reflect.Pointer:
			if f.Type().Elem().Kind() != reflect.Int {
				t.Fatalf("field %s: pointer to %s not covered by this test", v.Type().Field(i).Name, f.Type().Elem().Kind())
			}
			n := i + 1
			f.Set(reflect.ValueOf(&n))
		default:
			t.Fatalf("field %s: kind %s not covered by this test", v.Type().Field(i).Name, f.Kind())
		}
	}
	std, _ := json.Marshal(&r)
	var a, b map[string]any
	if err := json.Unmarshal(r.AppendJSON(nil), &a); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(std, &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("AppendJSON\n%s\nencoding/json\n%s", r.AppendJSON(nil), std)
	}
}

func TestReadRecordsRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	cached := 17
	want := []Record{sampleRecord(), {ID: 8, Phase: PhaseFill, Status: StatusOK, ITLMs: []float64{}, CachedTokens: &cached}}
	want[0].Status, want[0].Error = StatusError, "x"
	want[0].Cell = "cell-1"
	for _, r := range want {
		buf.Write(append(r.AppendJSON(nil), '\n'))
	}
	buf.WriteString("\n")
	got, err := ReadRecords(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestReadRecordsErrors(t *testing.T) {
	ok := `{"id":1,"cell":"c","block":1,"phase":"measure","scheduled_ns":1,"sent_ns":2,"first_token_ns":3,"last_token_ns":4,"done_ns":5,"input_tokens":1,"output_tokens":1,"itl_ms":[],"status":"ok"}`
	for _, tc := range []struct{ in, want string }{
		{ok + "\n{", "requests line 2: invalid JSON"},
		{strings.Replace(ok, `"measure"`, `"bench"`, 1), `requests line 1: phase: "bench" is not fill, warmup, ramp or measure`},
		{strings.Replace(ok, `"ok"`, `"fine"`, 1), `requests line 1: status: "fine" is not ok or error`},
		{strings.Replace(ok, `"block":1`, `"block":1,"extra":2`, 1), `requests line 1: invalid JSON: json: unknown field "extra"`},
		{strings.Replace(ok, `"sent_ns":2`, `"sent_ns":"2"`, 1), "requests line 1: sent_ns: want int64, got string"},
		{strings.Replace(ok, `"first_token_ns":3`, `"first_token_ns":1`, 1), "requests line 1: first_token_ns: 1 is before sent_ns 2"},
		{strings.Replace(ok, `"done_ns":5`, `"done_ns":-5`, 1), "requests line 1: done_ns: must be ≥ 0, got -5"},
		{ok + " " + ok, "requests line 1: invalid JSON: more than one value"},
	} {
		_, err := ReadRecords(strings.NewReader(tc.in))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("ReadRecords(%.60q...) = %v, want prefix %q", tc.in, err, tc.want)
		}
	}
}

// BenchmarkRecordPath is the per-request record path without the network:
// parse a whole 16- or 256-chunk stream with pooled state, build the Record
// and encode its JSON line. allocs/op is per request and does not grow with
// the number of chunks: the per-chunk path allocates nothing.
func BenchmarkRecordPath(b *testing.B) {
	for _, n := range []int{16, 256} {
		b.Run("chunks="+strconv.Itoa(n), func(b *testing.B) {
			var s strings.Builder
			for range n {
				s.WriteString(chunkLine(" tok"))
			}
			s.WriteString(usageLine + "data: [DONE]\n\n")
			stream := []byte(s.String())
			rd := bytes.NewReader(stream)
			sc := &scratch{sse: newSSEReader(nil), st: streamState{times: make([]int64, 0, 512)}}
			line := make([]byte, 0, 8192)
			tick := int64(0)
			now := func() int64 { tick += 1000; return tick }
			b.ReportAllocs()
			for b.Loop() {
				rd.Reset(stream)
				sc.sse.reset(rd, nil)
				sc.st.reset(0)
				if err := sc.st.consume(sc.sse, now); err != nil {
					b.Fatal(err)
				}
				rec := Record{ID: 1, Phase: PhaseMeasure, FirstTokenNs: sc.st.firstNs, LastTokenNs: sc.st.lastNs,
					OutputTokens: sc.st.usageOut, ITLMs: sc.st.itlMs(), Status: StatusOK}
				line = append(rec.AppendJSON(line[:0]), '\n')
			}
		})
	}
}
