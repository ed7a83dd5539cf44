package main

import (
	"slices"
	"strings"

	"github.com/mbench/mbench/results"
)

// timingVerdicts are the verdicts graded from timing: the load generator's
// send lag and the engine's queue (on the simulated engine or a stub, the
// machine's speed decides them, not mbench's code).
var timingVerdicts = []string{string(results.VerdictClientLimited), string(results.VerdictSaturated)}

// verdictFollows reports whether got is the verdict a run whose records
// carry the cause of want must have: want itself, or a timing verdict
// whose reason the run gives and which outranks want (results.Verdicts
// lists them most severe first). It never excuses a verdict with no reason,
// nor one want outranks: a test holds its verdict's claim on any machine.
func verdictFollows(got, want string, reasons []string) bool {
	if got == want {
		return true
	}
	rank := func(v string) int { return slices.Index(results.Verdicts, results.Verdict(v)) }
	return slices.Contains(timingVerdicts, got) && rank(got) < rank(want) &&
		slices.ContainsFunc(reasons, func(r string) bool { return strings.HasPrefix(r, got+": ") })
}

// timingReason reports whether r is the reason of a timing verdict.
func timingReason(r string) bool {
	return slices.ContainsFunc(timingVerdicts, func(v string) bool { return strings.HasPrefix(r, v+": ") })
}
