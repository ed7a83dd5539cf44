package matrices

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/mbench/mbench/openloop"
)

// Warning is something valid that will not do what the user likely wants:
// a cell whose runs cannot reach min_completed, a prompt longer than the
// engine's context. `mbench validate` prints them; they do not stop a sweep.
type Warning struct {
	Line  int    // line of the field in the matrix file (0: none)
	Field string // e.g. measure.timeout
	Msg   string
}

func (w Warning) String(file string) string {
	if w.Line > 0 {
		return fmt.Sprintf("%s:%d: %s: %s", file, w.Line, w.Field, w.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", file, w.Field, w.Msg)
}

// Warnings checks what the matrix alone can tell: cells whose rate ×
// measure.timeout cannot send min_completed requests (every run would be
// incomplete), slurm time limits shorter than the estimated sweep (or
// block), and synthetic shapes whose input + output exceed the engine's max
// model length where the matrix says it (--max-model-len in the command or
// args, or the sim's max-model-len).
func (m *Matrix) Warnings() []Warning {
	var ws []Warning
	mc := m.Measure.MinCompleted
	if mc > 0 && m.Measure.Timeout > 0 {
		for _, r := range m.Rates {
			sends := r * m.Measure.Timeout.Seconds()
			if sends >= float64(mc) {
				continue
			}
			for _, sh := range m.Shapes {
				if sh.Trace != nil {
					continue // a trace runs to its request_limit, not to min_completed
				}
				ws = append(ws, Warning{Line: m.lines["measure.timeout"], Field: "measure.timeout",
					Msg: fmt.Sprintf("at rate %g req/s, measure.timeout %s sends about %.3g requests, fewer than min_completed %d: every run of shape %s at this rate will be incomplete (%s)",
						r, m.Measure.Timeout, sends, mc, sh.Name, timeoutHint(float64(mc)/r))})
			}
		}
	}
	ws = append(ws, m.slurmWarnings()...)
	for _, name := range m.ConfigOrder {
		maxLen, where := m.MaxModelLen(name)
		if maxLen <= 0 {
			continue
		}
		for _, sh := range m.Shapes {
			if sh.Trace != nil {
				continue // the trace's lengths are checked by the caller, who reads the trace
			}
			if n := shapeMaxTokens(sh); n > maxLen {
				ws = append(ws, Warning{Line: m.lines["shapes"], Field: "shapes." + sh.Name,
					Msg: fmt.Sprintf("prompts of up to %d input + output tokens exceed config %s's max model length %d (%s): the engine will refuse them (HTTP 400, class context_length)", n, name, maxLen, where)})
			}
		}
	}
	return append(ws, m.routerWarnings()...)
}

// maxSuggestedTimeout is the longest measure.timeout the rate warning
// suggests (a week): beyond it the rate, not the timeout, is what to change.
const maxSuggestedTimeout = 7 * 24 * 3600.0

// timeoutHint is what the rate warning suggests when min_completed requests
// need s seconds to send: a timeout of whole seconds, or, when s is beyond
// any timeout (a rate of 1e-9 req/s), a higher rate or a lower
// min_completed.
func timeoutHint(s float64) string {
	if !(s <= maxSuggestedTimeout) {
		return fmt.Sprintf("at this rate they take %.3g s to send: raise the rate or lower min_completed", s)
	}
	return "raise the timeout to at least " + strconv.FormatFloat(math.Floor(s)+1, 'f', 0, 64) + "s or lower min_completed"
}

// shapeMaxTokens is the largest input + output a synthetic shape can ask for.
func shapeMaxTokens(sh openloop.Shape) int {
	in, out := sh.Input, sh.Output
	if sh.InputDist != nil && sh.InputDist.Max > 0 {
		in = sh.InputDist.Max
	}
	if sh.OutputDist != nil && sh.OutputDist.Max > 0 {
		out = sh.OutputDist.Max
	}
	if sh.Prefix != nil {
		in = max(in, sh.Prefix.PrefixTokens)
	}
	return in + out
}

// maxModelLenRE finds vLLM's --max-model-len, which its argument parser
// also takes as --max_model_len (underscores and dashes are one).
var maxModelLenRE = regexp.MustCompile(`--max[-_]model[-_]len[= ]+([0-9]+)`)

// MaxModelLen is config's max model length where the matrix says it, and
// where: the sim's max-model-len flag, or --max-model-len in the engine
// command or the config's args. 0 when it does not say.
func (m *Matrix) MaxModelLen(config string) (int, string) {
	c, ok := m.Configs[config]
	if !ok {
		return 0, ""
	}
	if m.Engine.Kind == EngineSim {
		for _, flags := range []map[string]string{c.Sim, m.Engine.Sim} {
			if v, ok := flags["max-model-len"]; ok {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					return n, "sim max-model-len"
				}
			}
		}
		return 0, ""
	}
	text := m.Engine.Command + " " + strings.Join(c.Args, " ")
	if mm := maxModelLenRE.FindAllStringSubmatch(text, -1); len(mm) > 0 {
		n, err := strconv.Atoi(mm[len(mm)-1][1]) // vLLM's argparse keeps the last
		if err == nil {
			return n, "--max-model-len"
		}
	}
	return 0, ""
}
