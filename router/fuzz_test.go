package router

import (
	"encoding/json"
	"testing"
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
