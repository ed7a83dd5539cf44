package matrices

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
)

// Cells expands the matrix into configs (file order) × rates × shapes.
func (m *Matrix) Cells() []Cell {
	var out []Cell
	for _, name := range m.ConfigOrder {
		for _, r := range m.Rates {
			for _, s := range m.Shapes {
				out = append(out, m.cell(name, r, s))
			}
		}
	}
	return out
}

// cell is config name (which must exist) at rate with shape s.
func (m *Matrix) cell(name string, rate float64, s openloop.Shape) Cell {
	c := m.Configs[name]
	return Cell{results.CellInfo{ID: m.cellID(c, rate, s), Config: name, Rate: rate, Shape: s.Name, SameAs: c.SameAs}, s}
}

// cellID hashes the canonical resolved cell spec: seed, engine, config
// (same_as followed, name included), rate, shape, arrival and measure. Map
// keys are sorted, so YAML key order does not matter; the position of a
// config, rate or shape in its list is not part of it.
func (m *Matrix) cellID(c *Config, rate float64, s openloop.Shape) string {
	spec := map[string]any{
		"v":       1,
		"seed":    m.Seed,
		"engine":  m.engineSpec(false),
		"config":  map[string]any{"name": c.Name, "launch": m.configSpec(c)},
		"rate":    rate,
		"shape":   m.shapeSpec(s),
		"arrival": m.arrivalSpec(),
		"measure": m.measureSpec(),
	}
	m.loadgenSpec(spec)
	return mustHash(spec, 12)
}

// mustHash is hashJSON that cannot fail (validated matrices always encode).
func mustHash(v any, n int) string {
	h, err := hashJSON(v, n)
	if err != nil {
		h, _ = hashJSON(fmt.Sprintf("%#v", v), n)
	}
	return h
}

func (m *Matrix) engineSpec(full bool) map[string]any {
	e := m.Engine
	s := map[string]any{"kind": e.Kind, "command": e.Command, "model": e.Model,
		"env": redactMap(e.Env), "sim": orEmpty(e.Sim), "instrument": e.Instrument}
	if t := e.TokenIDs; !t.IsZero() { // only when set: the prompts change, and matrices without it keep their hash
		s["token_ids"] = map[string]any{"min": t.Min, "max": t.Max}
	}
	if full {
		s["ready_timeout"], s["stagger"], s["grace"] = e.ReadyTimeout.String(), e.Stagger.String(), e.Grace.String()
		s["port"], s["restart"] = e.Port, e.Restart
	}
	return s
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// configSpec is what a config contributes to a launch (not its name).
func (m *Matrix) configSpec(c *Config) map[string]any {
	hosts := c.Topology.Hosts
	if len(hosts) == 0 { // default "every host": independent of their file order
		hosts = append([]string(nil), m.HostOrder...)
		sort.Strings(hosts)
	}
	s := map[string]any{"kv_transfer_config": c.KVTransferConfig, "args": append([]string{}, c.Args...), "env": redactMap(c.Env),
		"sim": orEmpty(c.Sim), "bootstrap_port": c.BootstrapPort,
		"topology": map[string]any{"hosts": hosts, "instances_per_host": c.Topology.InstancesPerHost,
			"gpus_per_instance": c.Topology.GPUsPerInstance}}
	if r := c.Router; r != nil {
		s["router"] = map[string]any{"command": r.Command, "host": r.Host, "port": r.Port,
			"ready_path": r.ReadyPath, "env": redactMap(r.Env)}
	}
	if c.PD != nil {
		s["pd"] = pdSpec(c.PD)
	}
	return s
}

// shapeSpec is s as the hashes see it: its file paths as written, so that
// ids do not depend on where the matrix lies.
func (m *Matrix) shapeSpec(s openloop.Shape) map[string]any {
	out := map[string]any{"name": s.Name, "input": s.Input, "output": s.Output}
	dist := func(d *openloop.Dist) map[string]any {
		return map[string]any{"kind": d.Kind, "min": d.Min, "max": d.Max, "median": d.Median, "p90": d.P90}
	}
	if s.InputDist != nil {
		out["input_dist"] = dist(s.InputDist)
	}
	if s.OutputDist != nil {
		out["output_dist"] = dist(s.OutputDist)
	}
	if p := s.Prefix; p != nil {
		out["prefix"] = map[string]any{"num_prefixes": p.NumPrefixes, "prefix_tokens": p.PrefixTokens}
	}
	if f := s.CacheFill; f != nil {
		out["cache_fill"] = map[string]any{"prefixes": f.Prefixes, "prefix_tokens": f.PrefixTokens}
	}
	if t := s.Trace; t != nil {
		out["trace"] = map[string]any{"path": m.written[s.Name], "time_scale": t.TimeScale,
			"request_limit": t.RequestLimit, "max_inflight_sessions": t.MaxInflightSessions}
	}
	if ds := s.Dataset; ds != nil {
		out["dataset"] = map[string]any{"path": m.written[s.Name], "format": string(ds.Format)}
	}
	return out
}

func (m *Matrix) arrivalSpec() map[string]any {
	return map[string]any{"process": m.Arrival.Process, "burstiness": m.Arrival.Burstiness}
}

func (m *Matrix) measureSpec() map[string]any {
	x := m.Measure
	spec := map[string]any{"warmup_requests": x.WarmupRequests, "min_completed": x.MinCompleted,
		"timeout": x.Timeout.String(), "drain_timeout": x.DrainTimeout.String(),
		"abort_if": map[string]any{"max_inflight": x.AbortIf.MaxInflight, "max_ttft": x.AbortIf.MaxTTFT.String()}}
	if x.MaxErrorRateSet { // only when set, so cells of older matrices keep their hashes
		spec["max_error_rate"] = x.MaxErrorRate
	}
	if x.AllowShortOutputs { // only when set: matrices without it keep their hash
		spec["allow_short_outputs"] = true
	}
	if x.RequestTimeout > 0 { // only when set: matrices without it keep their hash
		spec["request_timeout"] = x.RequestTimeout.String()
	}
	return spec
}

// Resolved returns the canonical JSON (compact, keys sorted) of the matrix
// after defaults, same_as and paths are resolved, with its cells. Secret env
// values are redacted. Trace paths appear as written, so the result does
// not depend on where the matrix file lives.
func (m *Matrix) Resolved() ([]byte, error) {
	hosts := map[string]any{}
	for name, h := range m.Hosts {
		e := map[string]any{"address": h.Address, "gpus": append([]int{}, h.GPUs...), "host_key_policy": h.HostKeyPolicy,
			"tunnel": h.Tunnel, "workdir": h.Workdir, "mbench_path": h.MbenchPath}
		if h.Slurm != nil {
			e["slurm"] = h.Slurm
		}
		hosts[name] = e
	}
	configs := map[string]any{}
	for name, c := range m.Configs {
		s := m.configSpec(c)
		s["same_as"] = c.SameAs
		configs[name] = s
	}
	shapes := make([]any, len(m.Shapes))
	for i, s := range m.Shapes {
		shapes[i] = m.shapeSpec(s)
	}
	var cells []any
	for _, c := range m.Cells() {
		cells = append(cells, map[string]any{"id": c.ID, "config": c.Config, "rate": c.Rate, "shape": c.Shape, "same_as": c.SameAs})
	}
	r := m.Repeat
	doc := map[string]any{
		"name": m.Name, "seed": m.Seed, "hosts": hosts, "host_order": m.HostOrder,
		"engine": m.engineSpec(true), "configs": configs, "config_order": m.ConfigOrder,
		"rates": m.Rates, "shapes": shapes,
		"arrival": m.arrivalSpec(),
		"measure": m.measureSpec(),
		"repeat": map[string]any{"min": r.Min, "max": r.Max, "metric": r.Metric, "rel_ci": r.RelCI,
			"confidence": r.Confidence, "budget": r.Budget.String(), "only_unconverged": r.OnlyUnconverged,
			"randomize": r.Randomize, "fresh_restart": r.FreshRestart},
		"baseline": m.Baseline, "compare": m.Compare,
		"gate": map[string]any{"enabled": m.Gate.Enabled, "temp_band_c": m.Gate.TempBandC,
			"timeout": m.Gate.Timeout.String(), "mem_tolerance_mib": m.Gate.MemToleranceMiB},
		"probe": m.probeSpec(),
		"cells": cells,
	}
	if m.Capacity != nil { // only when set: fixed-rate matrices keep their hash
		doc["capacity"] = m.Capacity.spec()
	}
	if m.SLO != nil { // only when set: matrices without it keep their hash
		doc["slo"] = sloSpec(m.SLO)
	}
	if len(m.Metadata) > 0 { // the user's record: in the hash, not the cell ids
		md := make(map[string]string, len(m.Metadata))
		for k, v := range m.Metadata { // a note may quote a URL with its password
			md[k] = openloop.RedactUserinfo(v)
		}
		doc["metadata"] = md
	}
	if len(m.Measure.Percentiles) > 0 { // the analysis, not the load: in the hash, not the cell ids
		doc["measure"].(map[string]any)["percentiles"] = m.Measure.Percentiles
	}
	m.loadgenSpec(doc)
	js, err := compactJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("matrix %s: encode resolved matrix: %w", m.File, err)
	}
	return []byte(js), nil // secrets were redacted by field above
}

// Launch-time allowances used by EstimateDuration.
const (
	simLaunch  = time.Second
	vllmLaunch = 2 * time.Minute
	simDrain   = 500 * time.Millisecond
	vllmDrain  = 10 * time.Second
)

// EstimateDuration estimates the time of repeat.min blocks: per run
// (cache-fill + warmup + min_completed requests)/rate (capped at
// measure.timeout; trace shapes count as measure.timeout) plus a drain
// allowance (min(drain_timeout, 0.5s sim | 10s vllm)), plus one launch
// allowance (1s sim | 2m vllm, plus stagger per extra instance) for every
// expected engine change within a block.
func (m *Matrix) EstimateDuration() time.Duration {
	return secondsDuration(m.passSeconds(m.Cells()) * float64(m.Repeat.Min))
}

// secondsDuration is secs as a Duration rounded to the second, saturating.
func secondsDuration(secs float64) time.Duration {
	if secs > math.MaxInt64/1e9 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(secs * 1e9).Round(time.Second)
}

// passSeconds estimates one block's pass over cells (EstimateDuration's
// rules), in seconds.
func (m *Matrix) passSeconds(cells []Cell) float64 {
	if len(cells) == 0 {
		return 0
	}
	drain, launch := min(m.Measure.DrainTimeout, simDrain), simLaunch
	if m.Engine.Kind == EngineVLLM {
		drain, launch = min(m.Measure.DrainTimeout, vllmDrain), vllmLaunch
	}
	keyOf := map[string]string{}
	maxInst := 1
	for _, name := range m.ConfigOrder {
		keyOf[name] = name
		if l, err := m.Launch(name, Runtime{}); err == nil {
			keyOf[name] = l.Key
			maxInst = max(maxInst, len(l.Instances))
		}
	}
	launch += m.Engine.Stagger * time.Duration(maxInst-1)
	var secs float64
	counts := map[string]float64{}
	var launches float64 = 1
	for i, c := range cells {
		run := m.Measure.Timeout.Seconds()
		if c.Spec.Trace == nil {
			n := float64(m.Measure.WarmupRequests + m.Measure.MinCompleted)
			if c.Spec.CacheFill != nil {
				n += float64(c.Spec.CacheFill.Prefixes)
			}
			run = math.Min(run, n/c.Rate)
		}
		secs += run + drain.Seconds()
		counts[keyOf[c.Config]]++
		if i > 0 && keyOf[c.Config] != keyOf[cells[i-1].Config] {
			launches++
		}
	}
	n := float64(len(cells))
	switch {
	case m.Engine.Restart == "every_run" || m.Repeat.FreshRestart:
		launches = n
	case m.Repeat.Randomize && n > 1: // expected changes between neighbours of a random order
		same := 0.0
		for _, c := range counts {
			same += c * (c - 1)
		}
		launches = 1 + (n-1)*(1-same/(n*(n-1)))
	}
	return secs + launches*launch.Seconds()
}

// probeSpec is the resolved probe section. throttle_max_fraction appears
// only when not the default, so that matrices written before it existed
// keep their hash (and their sweeps stay resumable).
func (m *Matrix) probeSpec() map[string]any {
	p := map[string]any{"interval": m.Probe.Interval.String(), "path": m.Probe.Path}
	if m.Probe.ThrottleMaxFraction != DefaultThrottleMaxFraction {
		p["throttle_max_fraction"] = m.Probe.ThrottleMaxFraction
	}
	return p
}
