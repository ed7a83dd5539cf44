package matrices

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Limits that keep hostile documents (alias bombs, self-referential anchors)
// from exhausting time or memory.
const (
	maxSteps = 200_000 // mapping/sequence entries visited, aliases expanded
	maxDepth = 48      // nesting of merges, aliases and free-form values
)

// decoder walks a yaml.Node tree, collecting every problem with its line.
type decoder struct {
	file    string
	errs    Errors
	steps   int
	tooDeep bool
	lines   map[string]int    // field path → line of its value
	secrets map[yamlPos]bool  // where secret values stand (RedactedSource)
	written map[string]string // shape name → trace or dataset path as written
}

// secret marks v's value as secret: RedactedSource replaces it.
func (d *decoder) secret(v *yaml.Node) { d.secrets[yamlPos{v.Line, v.Column}] = true }

// add records a problem.
func (d *decoder) add(line int, field, valid, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...), Valid: valid})
}

// spend accounts for n visited entries; false once the budget is exhausted.
func (d *decoder) spend(n int, line int) bool {
	if d.tooDeep {
		return false
	}
	d.steps += n
	if d.steps > maxSteps {
		d.tooDeep = true
		d.add(line, "", "a smaller document with fewer alias expansions", "document too complex (more than %d entries after alias expansion)", maxSteps)
		return false
	}
	return true
}

// deref follows aliases; nil when the chain is unreasonably long.
func (d *decoder) deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > maxDepth || !d.spend(1, n.Line) {
			return nil
		}
		n = n.Alias
	}
	return n
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe names what a node is, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
	default:
		return "an unsupported YAML node"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "…"
	}
	switch n.ShortTag() {
	case "!!null":
		return "an empty value"
	case "!!str":
		if _, err := strconv.ParseFloat(n.Value, 64); n.Style == 0 && errors.Is(err, strconv.ErrRange) {
			return "number " + v + ", beyond what a float64 holds" // 1e400: YAML takes it for a string
		}
		return fmt.Sprintf("string %q", v)
	case "!!int":
		return "integer " + v
	case "!!float":
		return "number " + v
	case "!!bool":
		return "boolean " + v
	}
	return fmt.Sprintf("%s %q", n.ShortTag(), v)
}

// pair is one key/value of a mapping after aliases and merge keys (<<) are
// resolved.
type pair struct {
	key  string
	k, v *yaml.Node
}

// pairs returns the entries of mapping n in file order. Explicit keys win
// over merged ones; duplicate keys and non-scalar keys are errors.
func (d *decoder) pairs(n *yaml.Node, path string, depth int) []pair {
	if depth > maxDepth {
		if !d.tooDeep {
			d.tooDeep = true
			d.add(n.Line, path, "shallower nesting of merge keys", "merge keys nested too deeply")
		}
		return nil
	}
	if !d.spend(len(n.Content)/2+1, n.Line) {
		return nil
	}
	var out []pair
	var merges []*yaml.Node
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.deref(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			line := n.Line
			if k != nil {
				line = k.Line
			}
			d.add(line, path, "plain string keys", "mapping key must be a string, got %s", describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.add(k.Line, join(path, k.Value), "each key at most once", "duplicate key (first at line %d)", first.Line)
			continue
		}
		seen[k.Value] = k
		out = append(out, pair{k.Value, k, v})
	}
	for _, mv := range merges {
		mv = d.deref(mv)
		var srcs []*yaml.Node
		switch {
		case mv != nil && mv.Kind == yaml.MappingNode:
			srcs = []*yaml.Node{mv}
		case mv != nil && mv.Kind == yaml.SequenceNode:
			for _, s := range mv.Content {
				srcs = append(srcs, d.deref(s))
			}
		default:
			srcs = []*yaml.Node{mv}
		}
		for _, src := range srcs {
			if src == nil || src.Kind != yaml.MappingNode {
				line := n.Line
				if src != nil {
					line = src.Line
				}
				d.add(line, join(path, "<<"), "a mapping or a list of mappings (usually an alias such as *base)", "merge value is %s", describe(src))
				continue
			}
			for _, p := range d.pairs(src, path, depth+1) {
				if _, dup := seen[p.key]; !dup {
					seen[p.key] = p.k
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// mapping returns the entries of n, which must be a mapping or empty (null
// or absent: no entries). ok is false when n is something else.
func (d *decoder) mapping(n *yaml.Node, path string) ([]pair, bool) {
	n = d.deref(n)
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.MappingNode {
		d.add(n.Line, path, "a mapping of key: value", "expected a mapping, got %s", describe(n))
		return nil, false
	}
	return d.pairs(n, path, 0), true
}

// field describes one known key of an object.
type field struct {
	name     string
	required bool
	set      func(v *yaml.Node, path string)
}

// object decodes mapping n field by field; line is where to report missing
// required keys when n is absent. It reports unknown keys with the list of
// valid ones, and returns false if n was not a mapping.
func (d *decoder) object(n *yaml.Node, path string, line int, fields []field) bool {
	if dn := d.deref(n); dn != nil && !isNull(dn) {
		line = dn.Line
	}
	ps, ok := d.mapping(n, path)
	if !ok {
		return false
	}
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	got := map[string]bool{}
	for _, p := range ps {
		i := slices.Index(names, p.key)
		if i < 0 {
			if vis := visibleKey(p.key); vis != p.key { // a zero-width space, a control character, a NUL
				d.add(p.k.Line, join(path, strconv.Quote(p.key)), strings.Join(names, ", "),
					"unknown key: it holds invisible or control characters%s", suggest(vis, names))
				continue
			}
			d.add(p.k.Line, join(path, p.key), strings.Join(names, ", "), "unknown key%s", suggest(p.key, names))
			continue
		}
		got[p.key] = true
		fp := join(path, p.key)
		v := d.deref(p.v)
		if v == nil {
			continue
		}
		d.lines[fp] = v.Line
		fields[i].set(v, fp)
	}
	for _, f := range fields {
		if f.required && !got[f.name] {
			d.add(line, join(path, f.name), "", "missing required key")
		}
	}
	return true
}

// str decodes a non-empty scalar as a string (numbers and booleans are
// accepted as their text, so env: {PORT: 8998} works).
func (d *decoder) str(v *yaml.Node, path string) (string, bool) {
	if v.Kind != yaml.ScalarNode || isNull(v) {
		d.add(v.Line, path, "a string", "expected a string, got %s", describe(v))
		return "", false
	}
	return v.Value, true
}

// integer decodes an integer within [lo, hi].
func (d *decoder) integer(v *yaml.Node, path string, lo, hi int64) (int64, bool) {
	valid := fmt.Sprintf("an integer from %d to %d", lo, hi)
	switch {
	case lo == math.MinInt64:
		valid = "an integer"
	case hi == math.MaxInt64:
		valid = fmt.Sprintf("an integer ≥ %d", lo)
	}
	var x int64
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&x) != nil {
		d.add(v.Line, path, valid, "expected an integer, got %s", describe(v))
		return 0, false
	}
	if x < lo || x > hi {
		d.add(v.Line, path, valid, "%d is out of range", x)
		return 0, false
	}
	return x, true
}

// intField is integer narrowed to int.
func (d *decoder) intField(v *yaml.Node, path string, lo, hi int64) int {
	x, _ := d.integer(v, path, lo, hi)
	return int(x)
}

// number decodes a finite number; positive requires > 0, else ≥ 0.
func (d *decoder) number(v *yaml.Node, path string, positive bool) (float64, bool) {
	valid := "a number ≥ 0"
	if positive {
		valid = "a number > 0"
	}
	var x float64
	tag := v.ShortTag()
	if v.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") || v.Decode(&x) != nil {
		d.add(v.Line, path, valid, "expected a number, got %s", describe(v))
		return 0, false
	}
	if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 || (positive && x == 0) {
		d.add(v.Line, path, valid, "%s is out of range", v.Value)
		return 0, false
	}
	return x, true
}

// boolean decodes true or false.
func (d *decoder) boolean(v *yaml.Node, path string) bool {
	var b bool
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		d.add(v.Line, path, "true, false", "expected a boolean, got %s", describe(v))
	}
	return b
}

// duration decodes a non-negative Go duration ("90s", "15m", "1h30m"); a
// bare 0 is accepted.
func (d *decoder) duration(v *yaml.Node, path string) time.Duration {
	const valid = "a Go duration such as 250ms, 90s, 15m or 1h30m"
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int" && v.Value == "0" {
		return 0
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		d.add(v.Line, path, valid, "expected a duration, got %s", describe(v))
		return 0
	}
	x, err := time.ParseDuration(v.Value)
	if err != nil {
		d.add(v.Line, path, valid, "invalid duration %q", v.Value)
		return 0
	}
	if x < 0 {
		d.add(v.Line, path, valid, "duration %q is negative", v.Value)
		return 0
	}
	return x
}

// enum decodes one of values.
func (d *decoder) enum(v *yaml.Node, path string, values ...string) (string, bool) {
	valid := strings.Join(values, ", ")
	if v.Kind != yaml.ScalarNode || isNull(v) {
		d.add(v.Line, path, valid, "expected one of the values below, got %s", describe(v))
		return "", false
	}
	if !slices.Contains(values, v.Value) {
		d.add(v.Line, path, valid, "unknown value %q%s", v.Value, suggest(v.Value, values))
		return "", false
	}
	return v.Value, true
}

// list returns the dereferenced elements of sequence v with their paths.
func (d *decoder) list(v *yaml.Node, path string) ([]*yaml.Node, []string, bool) {
	if v.Kind != yaml.SequenceNode {
		d.add(v.Line, path, "a list such as [a, b]", "expected a list, got %s", describe(v))
		return nil, nil, false
	}
	if !d.spend(len(v.Content)+1, v.Line) {
		return nil, nil, false
	}
	var out []*yaml.Node
	var paths []string
	for i, e := range v.Content {
		e = d.deref(e)
		if e == nil {
			continue
		}
		p := path + "[" + strconv.Itoa(i) + "]"
		d.lines[p] = e.Line
		out = append(out, e)
		paths = append(paths, p)
	}
	return out, paths, true
}

// visibleKey is key without the runes a terminal does not show (zero-width
// spaces, control characters, NUL): what the user believes they typed.
func visibleKey(key string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, key)
}
