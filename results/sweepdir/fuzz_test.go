package sweepdir

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mbench/mbench/results"
)

// FuzzParseRunSummary reads arbitrary summary_A.json text: parse errors are
// fine, panics are not, and a parsed summary flattens to finite metrics.
func FuzzParseRunSummary(f *testing.F) {
	if seeds, _ := filepath.Glob(filepath.Join("..", "report", "testdata", "sweep", "runs", "*", "b1", "summary_A.json")); len(seeds) > 0 {
		b, _ := os.ReadFile(seeds[0])
		f.Add(b)
	}
	f.Add([]byte(`{"p90_ttft_ms":null,"engine_step":{"timers":{"x":{"p50":1}}},"gpu":{"available":true,"per_gpu":[]}}`))
	f.Add([]byte(`{"completed":1e400}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parseRunSummary(data)
		if err != nil {
			return
		}
		for k, v := range results.RunMetrics(s) {
			if math.IsNaN(v) {
				t.Fatalf("metric %s is NaN", k)
			}
		}
	})
}
