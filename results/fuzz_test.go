package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"
)

// FuzzSummarizeRun feeds arbitrary requests.jsonl text through SummarizeRun:
// it must not panic, and whatever it returns must encode as JSON (no NaN or
// infinity may leak into the summary).
func FuzzSummarizeRun(f *testing.F) {
	for _, r := range knownRun().Records {
		b, _ := json.Marshal(r)
		f.Add(b, 10.0)
	}
	f.Add([]byte(`{"phase":"measure","status":"ok","sent_ns":5,"first_token_ns":3,"last_token_ns":1,"output_tokens":2,"itl_ms":[1e308,-1e308]}`), 0.0)
	f.Add([]byte(`{"phase":"measure","status":"ok","scheduled_ns":9223372036854775807,"sent_ns":1}`), 1e-300)
	f.Fuzz(func(t *testing.T, data []byte, offered float64) {
		var recs []Record
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			var r Record
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				recs = append(recs, r)
			}
		}
		in := RunInput{Cell: "c", Records: recs, Offered: offered, Start: t0, WindowStart: t0, WindowEnd: t0.Add(time.Second)}
		s, err := SummarizeRun(in)
		if err != nil {
			if !(offered < 0 || math.IsNaN(offered) || math.IsInf(offered, 0)) {
				t.Fatalf("unexpected error: %v", err)
			}
			return
		}
		if _, err := json.Marshal(s); err != nil {
			t.Fatalf("summary does not encode: %v", err)
		}
		RunMetrics(s)
	})
}
