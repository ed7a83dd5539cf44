package orchestrator

import (
	"cmp"
	"encoding/json"
	"fmt"
)

// recordedMethod is what export needs of the matrix as the sweep recorded
// it in sweep.json: the baseline, the compared metrics and the stopping
// rule's metric, target and confidence, and the user's metadata.
type recordedMethod struct {
	Baseline string   `json:"baseline"`
	Compare  []string `json:"compare"`
	Repeat   struct {
		Confidence float64 `json:"confidence"`
		Metric     string  `json:"metric"`
		RelCI      float64 `json:"rel_ci"`
		Max        int     `json:"max"`
	} `json:"repeat"`
	// Metadata is the matrix's metadata section: the user's record of the
	// sweep (vllm bench serve's --metadata), shown in the report.
	Metadata map[string]string `json:"metadata"`
}

// resolvedMethod reads the method from the resolved matrix recorded in
// st. Export never re-reads the matrix file: an edit made after the sweep
// (a confidence, a baseline) must not change its report silently.
func resolvedMethod(st *SweepState) (recordedMethod, error) {
	var r recordedMethod
	if len(st.Resolved) == 0 {
		return r, fmt.Errorf("sweep.json records no resolved matrix")
	}
	if err := json.Unmarshal(st.Resolved, &r); err != nil {
		return r, fmt.Errorf("sweep.json: resolved matrix: %w", err)
	}
	r.Repeat.Confidence = cmp.Or(r.Repeat.Confidence, 0.95)
	return r, nil
}
