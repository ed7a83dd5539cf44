package report

import (
	"fmt"
	"strings"

	"github.com/mbench/mbench/probes"
)

// renderContention writes what shared each run's CPUs, where the runs
// recorded it: mbench's scheduling delay, other work and stolen time on
// the load generator's cores, and each engine host's process-tree, busy
// and stolen CPU; runs whose load generator shared busy cores are marked,
// and said so in a sentence, without changing their verdicts.
func renderContention(b *strings.Builder, v *reportView) {
	var rows, marked []string
	total := 0
	for _, c := range v.ordered {
		for _, r := range c.Runs {
			if r.Sum == nil || r.Sum.Contention == nil {
				continue
			}
			total++
			ct := r.Sum.Contention
			sched, cores, other, steal, mark := "—", "—", "—", "—", ""
			if d := ct.SchedDelay; d != nil {
				sched = fmt.Sprintf("%.3g / %.3g", d.P99Ms, d.MaxMs)
			}
			if l := ct.LoadGenCores; l != nil {
				cores, other, steal = l.CPUs, fmt.Sprintf("%.0f", l.OtherPct), fmt.Sprintf("%.1f", l.StealPct)
			}
			if ct.SharedBusyCores() {
				mark = "shared busy cores"
				marked = append(marked, fmt.Sprintf("%s %s rate=%g b%d", c.Info.Config, c.Info.Shape, c.Info.Rate, r.Ref.Block))
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %g | %d | %s | %s | %s | %s | %s | %s |", c.Info.Config, c.Info.Shape, c.Info.Rate, r.Ref.Block, sched, cores, other, steal, engineHosts(ct.EngineHosts, r.Sum.ClientCPUPct), mark))
		}
	}
	if total == 0 {
		return
	}
	b.WriteString("## CPU contention\n\n")
	fmt.Fprintf(b, "What shared each run's CPUs, read from /proc when its load started and ended: mbench's own scheduling delay (how late a %.0f ms ticker ran, p99 / max), the load generator's cores with the share of them other work (all but mbench) and the hypervisor (steal) took, and per engine host the engine's process tree (%% of one core), beside the host's busy and stolen share of all its cores (and mbench's own where it runs there). A run whose load generator's cores were at least %d%% busy with other work or stolen is marked: its client-side timings include waits for a CPU.\n\n",
		float64(probes.SchedLagPeriod.Milliseconds()), probes.BusyCoresPct)
	if len(marked) > 0 {
		fmt.Fprintf(b, "**%d of %d runs shared busy cores with the load generator** (%s). This is a mark, not a verdict: their verdicts stand, but a latency difference between configs there may be the machine's. `mbench run --client-cpus` keeps the load generator off a local engine's cores.\n\n", len(marked), total, strings.Join(marked, ", "))
	}
	b.WriteString("| Config | Shape | Rate | Block | Sched delay p99 / max (ms) | Load generator CPUs | Other % | Steal % | Engine hosts: engine CPU % of a core, host busy % / steal % | Mark |\n|---|---|---|---|---|---|---|---|---|---|\n")
	b.WriteString(strings.Join(rows, "\n") + "\n\n")
}

// engineHosts writes each engine host's figures, with mbench's own CPU
// (client_cpu_pct) where it runs there too: "h1: 54% (3 procs), busy 45%
// / steal 5%, mbench 3.5%".
func engineHosts(hs []probes.EngineHost, clientCPUPct float64) string {
	if len(hs) == 0 {
		return "—"
	}
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = fmt.Sprintf("%s: %.0f%% (%d procs), busy %.0f%% / steal %.1f%%", mdCell(h.Host), h.EngineCPUPct, h.Procs, h.BusyPct, h.StealPct)
		if h.WithMbench {
			out[i] += fmt.Sprintf(", mbench %.1f%%", clientCPUPct)
		}
	}
	return strings.Join(out, "; ")
}
