package results

import (
	"fmt"
	"strings"
)

// Verdict is what one run is, decided in one place (Decide) and journaled.
// Only VerdictOK runs count toward the stopping rule, the comparisons and the
// tables; every other verdict is counted and explained in report.md and on
// the console's last line.
type Verdict string

// The verdicts, in the order they are checked: the first that applies wins,
// and the run's reasons list every one that applied.
const (
	// VerdictFailed: the engine or the harness failed (the engine died, a
	// file could not be written, the engine never became ready).
	VerdictFailed Verdict = "failed"
	// VerdictErrors: more measured requests failed than
	// measure.max_error_rate allows; the failures are counted by class.
	VerdictErrors Verdict = "errors"
	// VerdictSaturated: the engine could not keep up with the offered rate
	// (thr_ratio below the bound, or TTFT rising through the window).
	VerdictSaturated Verdict = "saturated"
	// VerdictIncomplete: fewer than min_completed measured requests
	// completed before measure.timeout (or the run was aborted).
	VerdictIncomplete Verdict = "incomplete"
	// VerdictClientLimited: the load generator did not send on schedule.
	VerdictClientLimited Verdict = "client_limited"
	// VerdictGPUContended: a process other than the engine used one of the
	// run's GPUs during the window.
	VerdictGPUContended Verdict = "gpu_contended"
	// VerdictThrottled: a GPU was power or thermally throttled for more of
	// the window than the matrix allows.
	VerdictThrottled Verdict = "throttled"
	// VerdictOK: a result.
	VerdictOK Verdict = "ok"
)

// Verdicts lists every verdict in the order of precedence.
var Verdicts = []Verdict{VerdictFailed, VerdictErrors, VerdictSaturated, VerdictIncomplete,
	VerdictClientLimited, VerdictGPUContended, VerdictThrottled, VerdictOK}

// Valid reports whether v is one of Verdicts.
func (v Verdict) Valid() bool {
	for _, k := range Verdicts {
		if v == k {
			return true
		}
	}
	return false
}

// Usable reports whether a run with this verdict is a result.
func (v Verdict) Usable() bool { return v == VerdictOK }

// ParseVerdict checks a verdict read from a file.
func ParseVerdict(s string) (Verdict, error) {
	v := Verdict(s)
	if !v.Valid() {
		names := make([]string, len(Verdicts))
		for i, k := range Verdicts {
			names[i] = string(k)
		}
		return "", fmt.Errorf("verdict %q is not one of %s", s, strings.Join(names, ", "))
	}
	return v, nil
}

// UnmarshalText refuses unknown verdicts.
func (v *Verdict) UnmarshalText(b []byte) error {
	p, err := ParseVerdict(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}
