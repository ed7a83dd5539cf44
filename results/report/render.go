package report

import (
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
)

// Logs reads the raw logs of a sweep's runs, which report.html and the
// plots draw from; run is the run's directory as results.RunRef.Dir
// names it.
type Logs interface {
	// StepDurations calls add with each step duration (µs, > 0, finite) of
	// the run's engine_step.jsonl, in order; a run without one is not an
	// error.
	StepDurations(run string, add func(us float64)) error
	// GPUSamples returns the run's GPU samples (gpu.jsonl): nil, nil
	// without any; after a bad line, the samples before it and the error.
	GPUSamples(run string) ([]probes.GPUSample, error)
	// StepWaiting calls add with the engine's queue (num_waiting) and the
	// time (ts_us) of each line of the run's engine_step.jsonl that has
	// both; a run without one is not an error.
	StepWaiting(run string, add func(tsUs int64, waiting float64)) error
	// Requests returns the run's requests.jsonl: nil, nil without one.
	Requests(run string) ([]openloop.Record, error)
}

// renderer draws an analysis: the redaction applied to the text it draws,
// the runs' raw logs, and where the problems that do not stop it go.
type renderer struct {
	redact func(string) string
	logs   Logs
	warn   func(format string, args ...any)
}
