package orchestrator

import "encoding/json"

// resolvedBasics reads the baseline, compared metrics and confidence from
// the resolved matrix recorded in sweep.json, for exports made where the
// matrix file is gone.
func resolvedBasics(st *SweepState) (baseline string, compare []string, confidence float64, ok bool) {
	var r struct {
		Baseline string   `json:"baseline"`
		Compare  []string `json:"compare"`
		Repeat   struct {
			Confidence float64 `json:"confidence"`
		} `json:"repeat"`
	}
	if len(st.Resolved) == 0 || json.Unmarshal(st.Resolved, &r) != nil || r.Baseline == "" {
		return "", nil, 0, false
	}
	if r.Repeat.Confidence == 0 {
		r.Repeat.Confidence = 0.95
	}
	return r.Baseline, r.Compare, r.Repeat.Confidence, true
}
