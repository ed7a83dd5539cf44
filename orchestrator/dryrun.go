package orchestrator

import (
	"fmt"
	"sort"
	"strings"

	"github.com/mbench/mbench/matrices"
)

// DryRun prints, per host, the exact commands a sweep of m would run, with
// secrets redacted, and runs nothing.
func DryRun(m *matrices.Matrix, opts Options) error {
	w := opts.Stdout
	self := opts.Self
	if self == "" {
		self = "mbench"
	}
	rt := matrices.Runtime{
		Self:    func(string) string { return self },
		StepLog: func(h string, i int) string { return fmt.Sprintf("<state:%s>/steps/engine_step.%d.jsonl", h, i) },
	}
	fmt.Fprintf(w, "# dry run of %s (%s engine): nothing is started\n", m.Name, m.Engine.Kind)
	if m.Engine.Kind == "sim" {
		fmt.Fprintln(w, "# engine kind sim: the SIMULATED engine (a model of an engine, not vLLM)")
	}
	for _, name := range m.ConfigOrder {
		l, err := m.Launch(name, rt)
		if err != nil {
			return fmt.Errorf("config %s: %w", name, err)
		}
		fmt.Fprintf(w, "\n## config %s (launch %s)\n", name, l.Key)
		byHost := map[string][]string{}
		for _, in := range l.Instances {
			byHost[in.Host] = append(byHost[in.Host], fmt.Sprintf("%s %s", envPrefix(in.Env), in.Command))
		}
		if r := l.Router; r != nil {
			byHost[r.Host] = append(byHost[r.Host], fmt.Sprintf("%s %s   # router, ready at :%d%s", envPrefix(r.Env), r.Command, r.Port, r.ReadyPath))
		}
		hostsSorted := make([]string, 0, len(byHost))
		for h := range byHost {
			hostsSorted = append(hostsSorted, h)
		}
		sort.Strings(hostsSorted)
		for _, h := range hostsSorted {
			fmt.Fprintf(w, "[%s %s]\n", h, m.Hosts[h].Address)
			for _, c := range byHost[h] {
				fmt.Fprintln(w, "  "+m.Redact(strings.TrimSpace(c)))
			}
		}
	}
	return nil
}

func envPrefix(env []matrices.EnvVar) string {
	var b strings.Builder
	for _, e := range env {
		v := e.Value
		if e.Secret {
			v = "***"
		}
		fmt.Fprintf(&b, "%s=%s ", e.Name, matrices.ShellQuote(v))
	}
	return b.String()
}
