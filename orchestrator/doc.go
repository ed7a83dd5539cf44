// Package orchestrator owns a sweep: the plan of randomized complete blocks,
// the lifecycle of one run (launch or reuse the engine, wait until ready,
// gate, probe, drive load, slice the step log, summarize), the stopping rule,
// the journal that makes a sweep resumable, and the sweep.json record of
// what was planned. How a command reaches a host (local or SSH) is the
// subpackage hosts.
package orchestrator
