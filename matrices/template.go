package matrices

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"text/template"
	tparse "text/template/parse"
)

// TemplateVars lists the variables command and env templates may use.
//
//	Model          engine.model
//	Port           the instance's port (engine.port + index; the router's port for routers)
//	GPUs           the instance's GPUs as a comma list ("" when none)
//	Instance       the instance index on its host (0 for routers)
//	Host, Address  the host's name and address
//	ConfigArgs     the config's args plus --kv-transfer-config (vllm) or sim flags (sim), quoted
//	Config         the config that defines the launch (same_as followed)
//	Self           the mbench binary on the host
//	StepLog        where the instance writes engine_step.jsonl
//	BootstrapPort  bootstrap_port + index (0 when not set)
//	RouterPort     the router's port (0 when no router)
//	Targets        space-separated http://host:port of every instance, as the process rendered
//	               reaches them: loopback on its own machine, a slurm node's address, an SSH
//	               host's address (in a PD topology: the consumers only)
//	Producers      comma-separated http://host:port of a PD topology's producers, likewise ("" without pd)
//	Bind           the address engines bind (Runtime.Bind, default 127.0.0.1)
//	BootstrapPorts comma-separated bootstrap ports of the instances the router sends prefills to:
//	               the producers of a PD topology, else every target, in the order of
//	               Producers / Targets ("" without bootstrap_port); for `mbench router --bootstrap-ports`
//	ClassBounds    class_bounds as a comma list (default 5000,20000,50000), for `mbench router --class-bounds`
//	NodeName       the machine the process runs on: a slurm node's name, an SSH host's address, localhost
//	NodeAddress    the address at which other machines reach it: a slurm node's address (Slurm's
//	               NodeAddr), an SSH host's address, the bind address here (e.g. a Mooncake local_hostname)
//
// Functions: add (e.g. {{add 29500 .Instance}}), eq, ne, lt, le, gt, ge,
// and, or, not. In commands, string values are shell-quoted; in env values
// they are raw.
var TemplateVars = []string{"Model", "Port", "GPUs", "Instance", "Host", "Address", "ConfigArgs",
	"Config", "Self", "StepLog", "BootstrapPort", "RouterPort", "Targets", "Bind", "Producers",
	"BootstrapPorts", "ClassBounds", "NodeName", "NodeAddress"}

// allowedFuncs are the functions templates may call. Everything else
// (printf, range, template, ...) is refused so that rendering stays cheap
// and bounded on any input.
var allowedFuncs = map[string]bool{"add": true, "eq": true, "ne": true, "lt": true,
	"le": true, "gt": true, "ge": true, "and": true, "or": true, "not": true}

var funcs = template.FuncMap{"add": func(a, b int) (int, error) {
	if (b > 0 && a > math.MaxInt-b) || (b < 0 && a < math.MinInt-b) {
		return 0, fmt.Errorf("add %d %d overflows a 64-bit integer", a, b)
	}
	return a + b, nil
}}

// maxRendered bounds the size of one rendered template.
const maxRendered = 256 << 10

var (
	tmplPrefixRE = regexp.MustCompile(`^template: t:\d+(:\d+)?: (executing "t" at <[^>]*>: )?`)
	missingKeyRE = regexp.MustCompile(`map has no entry for key "([^"]*)"`)
	// fieldRE is text/template's "at <.Model.X>: can't evaluate field X in
	// type interface {}": a field of a variable that is a plain value.
	fieldRE = regexp.MustCompile(`at <(\.[^>]*)>: can't evaluate field (\w+) in type`)
)

// funcsValid is the Valid text of errors about functions.
const funcsValid = "the functions add, eq, ne, lt, le, gt, ge, and, or, not"

func varsValid() string { return "." + strings.Join(TemplateVars, ", .") }

// templateError is a template problem: Msg and Valid as in Error.
type templateError struct{ msg, valid string }

func (e *templateError) Error() string { return e.msg }

// renderTemplate parses and executes src over data.
func renderTemplate(src string, data map[string]any) (string, error) {
	t, err := template.New("t").Option("missingkey=error").Funcs(funcs).Parse(src)
	if err != nil {
		return "", tmplErr(err)
	}
	if len(t.Templates()) > 1 {
		return "", &templateError{"template: define/block are not supported", "plain text with {{.Var}} actions"}
	}
	if err := checkNode(t.Root); err != nil {
		return "", err
	}
	var b limitedBuilder
	if err := t.Execute(&b, data); err != nil {
		return "", tmplErr(err)
	}
	return b.String(), nil
}

func tmplErr(err error) error {
	if sm := fieldRE.FindStringSubmatch(err.Error()); sm != nil {
		v, _, _ := strings.Cut(strings.TrimPrefix(sm[1], "."), ".")
		return &templateError{fmt.Sprintf("template: %s: .%s has no field %s (a template variable is a string, number or list)", sm[1], v, sm[2]), varsValid()}
	}
	msg := tmplPrefixRE.ReplaceAllString(err.Error(), "")
	if sm := missingKeyRE.FindStringSubmatch(msg); sm != nil {
		return &templateError{fmt.Sprintf("unknown template variable .%s%s", sm[1], suggest(sm[1], TemplateVars)), varsValid()}
	}
	if strings.Contains(msg, "not defined") && strings.HasPrefix(msg, "function") {
		return &templateError{"template: " + msg, funcsValid}
	}
	return &templateError{"template: " + msg, "text/template syntax with {{.Var}} and {{add N .Var}}"}
}

// checkNode refuses constructs that could make rendering unbounded.
func checkNode(n tparse.Node) error {
	switch n := n.(type) {
	case nil:
		return nil
	case *tparse.ListNode:
		if n == nil {
			return nil
		}
		return checkEach(n.Nodes)
	case *tparse.ActionNode:
		return checkNode(n.Pipe)
	case *tparse.PipeNode:
		if n == nil {
			return nil
		}
		return checkEach(n.Cmds)
	case *tparse.CommandNode:
		return checkEach(n.Args)
	case *tparse.ChainNode:
		return checkNode(n.Node)
	case *tparse.IdentifierNode:
		if !allowedFuncs[n.Ident] {
			return &templateError{fmt.Sprintf("template: function %q is not allowed", n.Ident), funcsValid}
		}
	case *tparse.IfNode:
		return checkBranch(&n.BranchNode)
	case *tparse.WithNode:
		return checkBranch(&n.BranchNode)
	case *tparse.RangeNode, *tparse.TemplateNode, *tparse.BreakNode, *tparse.ContinueNode:
		return &templateError{"template: range, template, break and continue are not supported", "plain text with {{.Var}}, {{add N .Var}}, if and with"}
	}
	return nil
}

// checkEach checks nodes in order and returns the first problem.
func checkEach[N tparse.Node](nodes []N) error {
	for _, c := range nodes {
		if err := checkNode(c); err != nil {
			return err
		}
	}
	return nil
}

func checkBranch(b *tparse.BranchNode) error {
	return errors.Join(checkNode(b.Pipe), checkNode(b.List), checkNode(b.ElseList))
}

// limitedBuilder is a strings.Builder that refuses to grow past maxRendered.
type limitedBuilder struct{ strings.Builder }

func (b *limitedBuilder) Write(p []byte) (int, error) {
	if b.Len()+len(p) > maxRendered {
		return 0, errors.New("rendered text is longer than 256 KiB")
	}
	return b.Builder.Write(p)
}
