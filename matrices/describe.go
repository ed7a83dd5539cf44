package matrices

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/mbench/mbench/engines"
	"github.com/mbench/mbench/shquote"
)

// Describe writes what `mbench validate` prints: the cells as a table, the
// number of cells × blocks with an estimated duration, and every config's
// launch rendered with placeholder runtime values, secrets redacted.
func (m *Matrix) Describe(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "matrix %s (%s), hash %s\n", m.Name, m.File, m.Hash)
	if m.Engine.Kind == EngineSim {
		fmt.Fprintf(&b, "engine: sim — SIMULATED engine, model %s\n", m.Engine.Model)
	} else if m.Engine.Kind == EngineVLLM {
		fmt.Fprintf(&b, "engine: %s, model %s\n", m.Engine.Kind, m.Engine.Model)
	} else {
		fmt.Fprintf(&b, "engine: %s (%s), model %s\n", m.Engine.Kind, engines.Of(engines.Kind(m.Engine.Kind)).Name, m.Engine.Model)
	}
	if t := m.Engine.TokenIDs; !t.IsZero() {
		fmt.Fprintf(&b, "prompt token ids: %v (engine.token_ids)\n", t)
	}
	if m.Capacity != nil {
		b.WriteString(m.CapacityPlan()) // a search chooses its rates: no fixed cells to list (describe_capacity.go)
	} else {
		m.describeCells(&b)
	}
	fmt.Fprintf(&b, "baseline %s; compare %s\n", m.Baseline, strings.Join(m.Compare, ", "))
	b.WriteString("\nlaunch commands (placeholder runtime values; secrets redacted):\n")
	for _, name := range m.ConfigOrder {
		if s := m.Configs[name].SameAs; s != "" {
			fmt.Fprintf(&b, "\nconfig %s: same launch as %s (A/A control)\n", name, s)
			continue
		}
		l, err := m.Launch(name, Runtime{})
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "\nconfig %s  (launch key %s)\n", name, l.Key)
		for _, in := range l.Instances {
			fmt.Fprintf(&b, "  %s[%d] @%s port %d", in.Host, in.Index, m.Hosts[in.Host].Address, in.Port)
			if len(in.GPUs) > 0 {
				fmt.Fprintf(&b, " gpus %s", joinInts(in.GPUs))
			}
			if in.BootstrapPort > 0 {
				fmt.Fprintf(&b, " bootstrap %d", in.BootstrapPort)
			}
			b.WriteString("\n")
			writeEnv(&b, in.Env)
			fmt.Fprintf(&b, "    $ %s\n", in.Command)
		}
		if rl := l.Router; rl != nil {
			fmt.Fprintf(&b, "  router @%s port %d, ready %s\n", rl.Host, rl.Port, rl.ReadyPath)
			writeEnv(&b, rl.Env)
			fmt.Fprintf(&b, "    $ %s\n", rl.Command)
		}
	}
	_, err := io.WriteString(w, m.Redact(b.String()))
	return err
}

// manyCells is the count beyond which Describe states a sweep's size
// before its table of cells.
const manyCells = 100

// describeCells writes a fixed-rate sweep's cells and its block plan.
func (m *Matrix) describeCells(b *strings.Builder) {
	cells := m.Cells()
	if len(cells) > manyCells { // the size first, before a long table
		fmt.Fprintf(b, "%d cells (%d configs × %d rates × %d shapes) × %d blocks (min) ≈ %s; up to %d runs\n",
			len(cells), len(m.ConfigOrder), len(m.Rates), len(m.Shapes), m.Repeat.Min, m.EstimateDuration(), len(cells)*m.Repeat.Max)
	}
	t := table.NewWriter()
	t.SetStyle(table.StyleLight)
	t.AppendHeader(table.Row{"cell", "config", "rate", "shape", "same_as"})
	for _, c := range cells {
		t.AppendRow(table.Row{c.ID, c.Config, strconv.FormatFloat(c.Rate, 'g', -1, 64), c.Shape, c.SameAs})
	}
	b.WriteString(t.Render())
	b.WriteString("\n")
	r := m.Repeat
	fmt.Fprintf(b, "%d cells × %d blocks (min) ≈ %s", len(cells), r.Min, m.EstimateDuration())
	fmt.Fprintf(b, "  [up to %d blocks until %s is within ±%g%% at %g%% confidence", r.Max, r.Metric, r.RelCI*100, r.Confidence*100)
	if r.Budget > 0 {
		fmt.Fprintf(b, ", budget %s", r.Budget)
	}
	b.WriteString("]\n")
}

func writeEnv(b *strings.Builder, env []EnvVar) {
	if len(env) == 0 {
		return
	}
	parts := make([]string, len(env))
	for i, e := range env {
		v := shquote.Quote(e.Value)
		if e.Secret {
			v = redacted
		}
		parts[i] = e.Name + "=" + v
	}
	fmt.Fprintf(b, "    env %s\n", strings.Join(parts, " "))
}
