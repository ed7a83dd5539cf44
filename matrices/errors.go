package matrices

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Error is one problem found in a matrix file: where it is (File, Line),
// which field (a dotted path such as configs.noop.kv_transfer_config.kv_role),
// what is wrong (Msg) and what would be valid (Valid, may be empty).
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
	Valid string
	cause error
}

// Error renders the problem as "file:line: field: msg; valid: valid".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Valid != "" {
		b.WriteString("; valid: ")
		b.WriteString(e.Valid)
	}
	return b.String()
}

// Unwrap returns the underlying error (for example a file-system error), if any.
func (e *Error) Unwrap() error { return e.cause }

// ExitCode is 2: a bad matrix is bad input.
func (e *Error) ExitCode() int { return 2 }

// Errors is every problem found in one matrix, sorted by line. It is the
// error type Load and Parse return.
type Errors []*Error

// Error renders one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// ExitCode is 2: a bad matrix is bad input.
func (es Errors) ExitCode() int { return 2 }

// Unwrap exposes each problem to errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// sorted orders the problems by line, then field, then message, and drops
// exact duplicates.
func (es Errors) sorted() Errors {
	slices.SortStableFunc(es, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), strings.Compare(a.Field, b.Field), strings.Compare(a.Msg, b.Msg))
	})
	return slices.CompactFunc(es, func(p, e *Error) bool {
		return p.Line == e.Line && p.Field == e.Field && p.Msg == e.Msg && p.Valid == e.Valid
	})
}

// asErrors converts err into Errors (nil stays nil).
func asErrors(err error) Errors {
	if err == nil {
		return nil
	}
	var es Errors
	if errors.As(err, &es) {
		return es
	}
	var e *Error
	if errors.As(err, &e) {
		return Errors{e}
	}
	return Errors{{Msg: err.Error(), cause: err}}
}

// suggest returns ` (did you mean "x"?)` when one of valid is close to got.
func suggest(got string, valid []string) string {
	if best := Nearest(got, valid); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// Nearest is the one of valid closest to got, at most two edits away
// (case aside), or "" when none is or got is shorter than 3.
func Nearest(got string, valid []string) string {
	best, bestD := "", 3
	for _, v := range valid {
		if d := editDistance(strings.ToLower(got), strings.ToLower(v)); d < bestD {
			best, bestD = v, d
		}
	}
	if len(got) < 3 {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bounded inputs only).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
