// Package matrices owns the experiment matrix: the YAML schema a researcher
// writes (hosts, engine, configs, rates, shapes, workload and stopping
// parameters), its strict validation with file:line errors, its expansion
// into cells with stable content-addressed ids, and the rendering of each
// config into concrete launch specs (per-instance commands, environment,
// ports, GPUs and an optional router).
//
// A run is described in the load generator's types (openloop.Shape,
// Arrival, …), which the matrix holds as they are; Matrix.RunConfig maps a
// cell onto its openloop.Config, and the rules of those types are theirs
// (their Validate), placed here at the line of the field they name.
//
// Load and Parse never panic on bad input. Every problem is reported as
//
//	file:line: field.path: what is wrong; valid: what would be valid
//
// and all problems of a file are returned together as an Errors value,
// sorted by line, whose ExitCode is 2.
//
// Commands and env values are text/template templates (missingkey=error)
// over the variables listed in TemplateVars plus the function add. Values
// that reach a shell command line are POSIX-quoted (shquote.Quote); env
// values are rendered raw because they are passed as environment, not as
// shell text.
//
// The example matrices users copy live beside this package: sim.yaml (the
// embedded default, run against the simulated engine), microbench3.yaml
// (the Phase-A connector microbench for vLLM), pd8.yaml (8×TP1 behind a
// router), agentic.yaml (trace replay on the sim), agentic8.yaml (the
// agentic routing policies, elastic offload and 4P+4D on vLLM) and
// agentic_sim.yaml (the same on simulated engines).
package matrices
