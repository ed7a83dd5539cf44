package simengine

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// metric is one Prometheus family in the text exposition format.
type metric struct {
	name, typ, help string
	samples         []sample
}

type sample struct {
	labels string // extra labels, e.g. `finished_reason="stop"`
	value  float64
}

// snapshotMetrics reads the engine's gauges and counters under its lock.
func (e *Engine) snapshotMetrics() []metric {
	e.mu.Lock()
	c := e.sch.c
	running, waiting := len(e.sch.running), len(e.sch.waiting)
	usage := e.sch.kv.usage()
	cached := e.sch.kv.numCached()
	e.mu.Unlock()
	one := func(v float64) []sample { return []sample{{value: v}} }
	var ext []metric
	if e.moon != nil {
		ext = append(ext, metric{"mbench_sim_waiting_remote_kv", "gauge",
			"Requests waiting for KV from a MooncakeConnector producer (a failed pull leaves them waiting, as vLLM does).",
			one(float64(e.moon.waitingRemote()))})
	}
	if e.cfg.KVRole != KVRoleNone {
		ext = append(ext, []metric{
			{"vllm:external_prefix_cache_queries_total", "counter", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.", one(float64(c.extQueries))},
			{"vllm:external_prefix_cache_hits_total", "counter", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.", one(float64(c.extHits))},
		}...)
	}
	return append([]metric{
		// vLLM's info gauge of its CacheConfig (one label per field; the sim
		// gives the fields it models), from which a router learns the KV
		// capacity: num_gpu_blocks × block_size tokens.
		{"vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig", []sample{{labels: fmt.Sprintf(
			`block_size="%d",num_gpu_blocks="%d",enable_prefix_caching="True"`, e.cfg.BlockSize, e.cfg.KVBlocks), value: 1}}},
		{"vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", one(float64(running))},
		{"vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", one(float64(waiting))},
		{"vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", one(usage)},
		{"vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", one(float64(c.queries))},
		{"vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", one(float64(c.hits))},
		{"vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", one(float64(c.preemptions))},
		{"vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", one(float64(c.promptTokens))},
		{"vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", one(float64(c.genTokens))},
		{"vllm:request_success_total", "counter", "Count of successfully processed requests.", []sample{
			{`finished_reason="length"`, float64(c.successLength)},
			{`finished_reason="stop"`, float64(c.successStop)},
		}},
		{"mbench_sim_steps_total", "counter", "Engine steps run by the simulated engine.", one(float64(c.steps))},
		{"mbench_sim_aborted_requests_total", "counter", "Requests aborted by their client.", one(float64(c.aborted))},
		{"mbench_sim_cached_blocks", "gauge", "Blocks held in the prefix cache, in use or free.", one(float64(cached))},
		{"mbench_sim_timeline_resets_total", "counter", "Steps that began more than 5 ms behind the simulated timeline " +
			"(the simulator was starved of CPU); each adds its lateness to request latencies.", one(float64(e.lateResets.Load()))},
		{"mbench_sim_launch_factor", "gauge", "This launch's multiplicative noise factor on step time.", one(e.cost.launchFactor)},
	}, ext...)
}

// labelEscaper escapes a Prometheus label value.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func (e *Engine) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	var b strings.Builder
	base := `engine="0",model_name="` + labelEscaper.Replace(e.cfg.Model) + `"`
	for _, m := range e.snapshotMetrics() {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.typ)
		for _, s := range m.samples {
			labels := base
			if s.labels != "" {
				labels += "," + s.labels
			}
			b.WriteString(m.name + "{" + labels + "} " + strconv.FormatFloat(s.value, 'g', -1, 64) + "\n")
		}
	}
	b.WriteString("# HELP mbench_sim_info This engine is SIMULATED (mbench sim, a model of an engine, not vLLM).\n" +
		"# TYPE mbench_sim_info gauge\nmbench_sim_info 1\n")
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}
