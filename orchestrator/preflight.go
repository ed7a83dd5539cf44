package orchestrator

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/shquote"
)

// PreflightOptions says what Preflight may do.
type PreflightOptions struct {
	// Offline checks only what this machine can tell: no host is dialled.
	Offline bool
	// SimFlags are the simulated engine's flags (step-base-us, …), which
	// its sim: maps may name.
	SimFlags []string
	// SkipPorts leaves the local ports alone: a sweep continued in its
	// directory may find its own engines there, left by an mbench that
	// died, which it stops before it launches (they are not another's).
	SkipPorts bool
	// Stderr takes SSH's warnings (a new host key accepted, …).
	Stderr io.Writer
}

// selfMarker stands for the mbench binary in commands rendered for the
// checks: it is uploaded by the sweep, so it is not looked for on hosts.
const selfMarker = "/<mbench on the host>/mbench"

// Preflight checks, before any engine starts or a GPU is held, what every
// run of m will need and the matrix file alone cannot say: the sim flags
// it names, every config's launch rendered, engine.model where it is a
// file (on the hosts that run the engine), the engine binary on each
// host's PATH (`command -v` there, with the instance's environment; a
// Slurm host's login node), and, on local hosts, the ports the launches
// use free. Every problem is a matrices.Error at the field's line; hosts
// are dialled only when there is something to check there, and not at all
// when opts.Offline.
func Preflight(ctx context.Context, m *matrices.Matrix, opts PreflightOptions) error {
	var es, bad []*matrices.Error
	if err := m.CheckSimFlags(opts.SimFlags); err != nil {
		return err // a launch would not render its flags as meant: the rest would mislead
	}
	needs := map[string]*hostNeeds{}
	need := func(h string) *hostNeeds {
		if needs[h] == nil {
			needs[h] = &hostNeeds{bins: map[string]binNeed{}, ports: map[int]string{}}
		}
		return needs[h]
	}
	rt := matrices.Runtime{Self: func(string) string { return selfMarker },
		StepLog: func(string, int) string { return "/dev/null" }, Bind: bindAddr(m)}
	model, modelIsFile := m.ModelFile()
	for _, name := range m.ConfigOrder {
		l, err := m.Launch(name, rt)
		if err != nil {
			if e, ok := err.(*matrices.Error); ok {
				bad = append(bad, e)
			} else {
				bad = append(bad, m.ErrorAt("configs."+name, "render the launch: "+err.Error()))
			}
			continue
		}
		for _, in := range l.Instances {
			hn := need(in.Host)
			hn.addBin(in.Command, in.Env, commandField(m), name)
			hn.addPort(in.Port, name)
			if in.BootstrapPort > 0 {
				hn.addPort(in.BootstrapPort, name)
			}
			hn.model = modelIsFile
		}
		if r := l.Router; r != nil {
			hn := need(r.Host)
			hn.addBin(r.Command, r.Env, "configs."+name+".router", name)
			hn.addPort(r.Port, name)
		}
	}
	if len(bad) > 0 { // the matrix's own problems (exit 2)
		return matrices.Problems(bad)
	}
	f := newFleet(m, "", "", &sweepLog{redactor: m.Redact, quiet: true, noted: map[string]bool{}}, Options{Stderr: opts.Stderr})
	for _, h := range slices.Sorted(maps.Keys(needs)) {
		hn, hc := needs[h], m.Hosts[h]
		local := isLocal(hc.Address)
		if local && !hc.IsSlurm() && !opts.SkipPorts {
			es = append(es, localPortProblems(m, h, hn.ports)...)
		}
		if !local && opts.Offline || len(hn.bins) == 0 && !hn.model {
			continue
		}
		conn, err := f.dialMachine(ctx, h)
		if err != nil {
			es = append(es, m.ErrorAt("hosts."+h, fmt.Sprintf("cannot reach the host to check it (mbench validate --offline skips this): %v", err)))
			continue
		}
		es = append(es, hn.check(ctx, m, conn, h, model, local)...)
		conn.Close()
	}
	if len(es) == 0 {
		return nil
	}
	return &PreflightError{Problems: matrices.Problems(es)}
}

// PreflightError is what a sweep would meet on its hosts: a binary not on
// the PATH, a model file that is not there, a port taken, a host that
// cannot be reached. Each problem names the matrix's file:line. It exits 1
// (the environment, not the matrix's form; a matrix error exits 2).
type PreflightError struct{ Problems error }

func (e *PreflightError) Error() string { return e.Problems.Error() }
func (e *PreflightError) Unwrap() error { return e.Problems }
func (e *PreflightError) ExitCode() int { return 1 }

// check looks on the host for the model file and the binaries.
func (hn *hostNeeds) check(ctx context.Context, m *matrices.Matrix, conn hosts.Host, h, model string, local bool) []*matrices.Error {
	var es []*matrices.Error
	where := "host " + h
	if m.Hosts[h].IsSlurm() {
		where += " (its login node; the job's nodes are assumed to share it)"
	}
	if hn.model {
		if missing, err := pathMissing(ctx, conn, model, local); err != nil {
			es = append(es, m.ErrorAt("engine.model", fmt.Sprintf("%s: check %s: %v", where, model, err)))
		} else if missing {
			es = append(es, m.ErrorAt("engine.model", fmt.Sprintf("%s has no %s: every launch would fail", where, model)))
		}
	}
	for _, bin := range slices.Sorted(maps.Keys(hn.bins)) {
		bn := hn.bins[bin]
		found, err := onPath(ctx, conn, bin, bn.env)
		switch {
		case err != nil:
			es = append(es, m.ErrorAt(bn.field, fmt.Sprintf("%s: look for %s: %v", where, bin, err)))
		case !found:
			es = append(es, m.ErrorAt(bn.field, fmt.Sprintf("%s: %q (config %s's command) is not on the PATH (command -v finds nothing): every launch would fail with \"not found\"", where, bin, bn.config)))
		}
	}
	return es
}

// hostNeeds is what the launches need of one host.
type hostNeeds struct {
	bins  map[string]binNeed // binary → where it is named
	ports map[int]string     // port → the first config using it
	model bool               // an engine there reads engine.model as a file
}

type binNeed struct {
	field, config string
	env           []matrices.EnvVar
}

func (hn *hostNeeds) addPort(port int, config string) {
	if _, ok := hn.ports[port]; !ok {
		hn.ports[port] = config
	}
}

func (hn *hostNeeds) addBin(command string, env []matrices.EnvVar, field, config string) {
	bin := commandBinary(command)
	if bin == "" || bin == selfMarker {
		return
	}
	if _, ok := hn.bins[bin]; !ok {
		hn.bins[bin] = binNeed{field: field, config: config, env: env}
	}
}

// commandField is the matrix field a launch's command comes from.
func commandField(m *matrices.Matrix) string {
	if m.Line("engine.command") > 0 {
		return "engine.command"
	}
	return "engine.kind" // the kind's default command
}

var (
	envAssign = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	shellMeta = regexp.MustCompile("[$`\"'(){};|&<>*?\\\\]")
)

// commandBinary is the program a shell command line runs first: its first
// word after variable assignments (and exec or env), or "" when that word
// is not a plain name (a substitution, a quoted string, a compound
// command), which the check then leaves alone.
func commandBinary(command string) string {
	words := strings.Fields(command)
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case envAssign.MatchString(w):
			continue
		case w == "exec" || w == "env" || (strings.HasPrefix(w, "-") && i > 0 && words[i-1] == "env"):
			continue
		case w == selfMarker:
			return w
		case shellMeta.MatchString(w):
			return ""
		}
		return w
	}
	return ""
}

// onPath runs `command -v` for bin on the host, in the environment the
// process will get.
func onPath(ctx context.Context, h hosts.Host, bin string, env []matrices.EnvVar) (bool, error) {
	var b strings.Builder
	for _, e := range env {
		fmt.Fprintf(&b, "export %s=%s; ", e.Name, shquote.Quote(e.Value))
	}
	fmt.Fprintf(&b, "if command -v -- %s >/dev/null 2>&1; then echo found; else echo missing; fi", shquote.Quote(bin))
	out, _, err := h.Run(ctx, b.String())
	if err != nil {
		return false, err
	}
	return hosts.LastLine(out) == "found", nil
}

// pathMissing reports whether path (a file or directory; ~/ is the host's
// home) is absent on the host.
func pathMissing(ctx context.Context, h hosts.Host, path string, local bool) (bool, error) {
	if local {
		if rest, ok := strings.CutPrefix(path, "~/"); ok {
			home, err := os.UserHomeDir()
			if err != nil {
				return false, err
			}
			path = filepath.Join(home, rest)
		}
		_, err := os.Stat(path)
		return os.IsNotExist(err), nil
	}
	arg := shquote.Quote(path)
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		arg = `"$HOME"/` + shquote.Quote(rest)
	}
	out, _, err := h.Run(ctx, "if [ -e "+arg+" ]; then echo found; else echo missing; fi")
	if err != nil {
		return false, err
	}
	return hosts.LastLine(out) == "missing", nil
}

// localPortProblems refuses the ports of a local host that another process
// holds now: every launch on them would fail, or meet a stale engine.
func localPortProblems(m *matrices.Matrix, host string, ports map[int]string) []*matrices.Error {
	tables := localTCPTables()
	var es []*matrices.Error
	for _, p := range slices.Sorted(maps.Keys(ports)) {
		use := portUse(tables, p)
		if use == "" {
			if busy, u := bindProbe("http://" + bindAddr(m) + ":" + strconv.Itoa(p)); busy {
				use = u
			}
		}
		if use != "" {
			es = append(es, m.ErrorAt("engine.port", fmt.Sprintf("host %s: port %d (config %s) is already in use (%s): stop what holds it or change engine.port", host, p, ports[p], use)))
		}
	}
	return es
}
