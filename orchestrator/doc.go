// Package orchestrator owns a sweep: the plan of randomized complete blocks,
// the lifecycle of one run (launch or reuse the engine, wait until ready,
// gate, probe, drive load, slice the step log, summarize), the stopping rule,
// the journal that makes a sweep resumable, and the sweep.json record of
// what was planned. What to run next and when to stop is decided by the pure
// package internal/plan from the values the sweep has stored; how a command
// reaches a host (local, SSH or Slurm) is the subpackage hosts.
package orchestrator
