package orchestrator

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/shquote"
)

// dryRun prints, per config and host, the exact command lines a sweep of m
// would start, each with the environment it gets (secret values as ***),
// the sweep's state directory on the host and how readiness is checked. It
// connects to nothing and runs nothing. Remote paths keep a leading ~ (the
// host's $HOME, learnt only on connecting); the sweep id is known when
// opts.Out is set.
func dryRun(m *matrices.Matrix, opts Options) error {
	w := cmp.Or(opts.Stdout, io.Discard)
	p := dryRunPaths{m: m, id: "<sweep id>", localState: filepath.Join("results", m.Name+"-<UTC timestamp>", ".state")}
	if abs, err := filepath.Abs(opts.Out); opts.Out != "" && err == nil {
		p.id, p.localState = sweepID(m.Name, abs), filepath.Join(abs, ".state")
	}
	fmt.Fprintf(w, "# dry run of %s (%s engine): nothing is started\n", m.Name, m.Engine.Kind)
	if m.Engine.Kind == matrices.EngineSim {
		fmt.Fprintln(w, "# engine kind sim: the SIMULATED engine (a model of an engine, not vLLM)")
	}
	if plan := m.CapacityPlan(); plan != "" { // a search: its rates are chosen as it runs
		fmt.Fprintf(w, "#\n# %s\n#\n", strings.ReplaceAll(strings.TrimSuffix(plan, "\n"), "\n", "\n# "))
	}
	dryRunSlurm(w, m, filepath.Dir(p.localState), p.id)
	rt := p.runtime(opts.Self)
	for _, name := range m.ConfigOrder {
		if err := dryRunConfig(w, m, name, rt, p.state); err != nil {
			return err
		}
	}
	return nil
}

// dryRunPaths are the places a sweep of m would use, as far as a dry run
// knows them: the sweep id only when the output directory is given.
type dryRunPaths struct {
	m              *matrices.Matrix
	id, localState string
}

// state is the sweep's state directory on host h.
func (p dryRunPaths) state(h string) string {
	hc := p.m.Hosts[h]
	switch {
	case isLocal(hc.Address):
		return p.localState
	case hc.Workdir != "":
		return path.Join(hc.Workdir, p.id)
	}
	return path.Join("~/.mbench", p.id)
}

// runtime is the matrix's view of the paths; self is the local mbench, if
// known.
func (p dryRunPaths) runtime(self string) matrices.Runtime {
	return matrices.Runtime{
		Self: func(h string) string {
			hc := p.m.Hosts[h]
			switch {
			case isLocal(hc.Address) && self != "":
				return self
			case isLocal(hc.Address):
				return "mbench"
			case hc.MbenchPath != "":
				return hc.MbenchPath
			}
			return path.Join(p.state(h), "bin", "mbench")
		},
		StepLog: func(h string, i int) string {
			return path.Join(p.state(h), "steps", fmt.Sprintf("engine_step.%d.jsonl", i))
		},
		Bind: dryRunBind(p.m),
	}
}

// dryRunConfig prints the command lines of config name, by host.
func dryRunConfig(w io.Writer, m *matrices.Matrix, name string, rt matrices.Runtime, state func(host string) string) error {
	l, err := m.Launch(name, rt)
	if err != nil {
		return fmt.Errorf("config %s: %w", name, err)
	}
	fmt.Fprintf(w, "\n## config %s (launch %s)\n", name, l.Key)
	fmt.Fprintf(w, "# %s\n", readiness(l))
	byHost := map[string][]string{}
	for _, in := range l.Instances {
		byHost[in.Host] = append(byHost[in.Host], envPrefix(in.Env)+slurmStep(m, in.Host, state(in.Host), m.Hosts[in.Host].SlurmNode(in.Index, in.GPUs), fmt.Sprintf("engine-%s-%d", in.Host, in.Index), len(in.GPUs), in.Command))
	}
	if r := l.Router; r != nil {
		byHost[r.Host] = append(byHost[r.Host], fmt.Sprintf("%s%s   # router, ready when GET :%d%s answers 200", envPrefix(r.Env), slurmStep(m, r.Host, state(r.Host), 0, "router-"+r.Host, 0, r.Command), r.Port, r.ReadyPath))
	}
	for _, h := range slices.Sorted(maps.Keys(byHost)) {
		hc := m.Hosts[h]
		reach := ""
		if !isLocal(hc.Address) && hc.Tunnel {
			reach = ", reached through SSH port forwarding"
		}
		addr := hc.Address
		if hc.IsSlurm() {
			addr = slurmVia(hc)
		}
		fmt.Fprintf(w, "[%s %s] state %s%s\n", h, addr, state(h), reach)
		if l.Instrument {
			fmt.Fprintf(w, "  # mbench_vllm step plugin installed in %s; every engine runs with PYTHONPATH=<that>:$PYTHONPATH\n", path.Join(state(h), "mbench_vllm"))
		}
		for _, c := range byHost[h] {
			fmt.Fprintln(w, "  "+m.Redact(c))
		}
	}
	return nil
}

// readiness says how a launch is started and when it counts as ready.
func readiness(l *matrices.Launch) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d instance(s)", len(l.Instances))
	if l.Stagger > 0 && len(l.Instances) > 1 {
		fmt.Fprintf(&b, " started %s apart", l.Stagger)
	}
	fmt.Fprintf(&b, " under setsid; ready when GET /health answers 200 on each")
	var bs []string
	for _, in := range l.Instances {
		if in.BootstrapPort > 0 {
			bs = append(bs, fmt.Sprint(in.BootstrapPort))
		}
	}
	if len(bs) > 0 {
		fmt.Fprintf(&b, " and GET /query on bootstrap ports %s", strings.Join(bs, ","))
	}
	if l.ReadyTimeout > 0 {
		fmt.Fprintf(&b, " (within %s)", l.ReadyTimeout)
	}
	if l.Router != nil {
		fmt.Fprintf(&b, "; load → router on %s:%d", l.Router.Host, l.Router.Port)
	} else {
		b.WriteString("; load round-robins over the instances")
	}
	return b.String()
}

// envPrefix renders env as NAME=value words before a command: secret values
// as ***, and a leading ~/ left unquoted so that it still expands.
func envPrefix(env []matrices.EnvVar) string {
	var b strings.Builder
	for _, e := range env {
		v := shquote.Path(e.Value)
		if e.Secret {
			v = "***"
		}
		fmt.Fprintf(&b, "%s=%s ", e.Name, v)
	}
	return b.String()
}
