package router

import (
	"encoding/json"
	"testing"

	"github.com/mbench/mbench/internal/conformance"
)

// FuzzPromptTokens: any prompt field is read or refused, never a panic; a
// list of ids reads back as itself.
func FuzzPromptTokens(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, `[[4,5]]`, `"a b c"`, `[]`, `[[1],[2]]`, `{"x":1}`, `null`, `[1.5]`, `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ids, err := promptTokens(raw)
		if err != nil {
			return
		}
		var direct []int64
		if json.Unmarshal(raw, &direct) == nil && len(direct) != len(ids) {
			t.Fatalf("%s: %d ids, want %d", raw, len(ids), len(direct))
		}
	})
}

// FuzzParseQuery: any /query answer is read or refused, never a panic; one
// that is read names at least one engine, by distinct ascending DP ranks.
func FuzzParseQuery(f *testing.F) {
	for _, name := range []string{conformance.MooncakeQueryUnregistered, conformance.MooncakeQueryRegistered} {
		f.Add(conformance.MooncakeBody(name, conformance.Mooncake{}))
	}
	for _, s := range []string{`{"1":{"engine_id":"b","worker_addr":{"0":{"0":"tcp://h:2"}}},"0":{"engine_id":"a","worker_addr":{"0":{"0":"tcp://h:1"}}}}`,
		`{"e":{"0":{"0":{"0":"tcp://h:1"}}}}`, `{"01":{}}`, `[]`, `null`, `{"-1":{"engine_id":"a","worker_addr":{"0":{}}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		engines, err := parseQuery(body)
		if err != nil {
			return
		}
		if len(engines) == 0 {
			t.Fatalf("%s: read with no engine", body)
		}
		for i, e := range engines {
			if e.id == "" || e.rank < 0 || (i > 0 && e.rank <= engines[i-1].rank) {
				t.Fatalf("%s: engines %v", body, engines)
			}
		}
	})
}
