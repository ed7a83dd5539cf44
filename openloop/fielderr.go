package openloop

import (
	"fmt"
	"strings"
)

// FieldError is a setting of a run that cannot be used. Path is the
// setting's path as the matrix names it ("arrival.ramp.from"), so that a
// caller can place it in its own terms: the matrix parser at file:line:field,
// mbench load at the flag that sets it. Msg says what is wrong and Valid,
// when set, what would do. It reads "arrival: ramp: from: <msg>", a segment
// in the words its rule gives it where it has some (`shape "s"`, "top_p 2").
type FieldError struct {
	Path, Msg, Valid string
	words            []string // how the message names each segment of Path; "" for the segment itself
}

func (e *FieldError) Error() string { return e.Tail(0) }

// Tail is the message from Path's segment n on: for "request.sampling.top_p"
// Tail(2) is "top_p 2: must be in (0, 1]", and Tail(3) is Msg.
func (e *FieldError) Tail(n int) string {
	var b strings.Builder
	for i, seg := range strings.Split(e.Path, ".")[n:] {
		if n+i < len(e.words) && e.words[n+i] != "" {
			seg = e.words[n+i]
		}
		b.WriteString(seg + ": ")
	}
	return b.String() + e.Msg
}

// fieldErr is a FieldError at path.
func fieldErr(path, valid, format string, args ...any) *FieldError {
	return namedErr(path, "", valid, format, args...)
}

// namedErr is a FieldError at path whose last segment the message names in
// words ("top_p 2", "lognormal: p90"; "" for the segment itself).
func namedErr(path, words, valid, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Msg: fmt.Sprintf(format, args...), Valid: valid,
		words: append(make([]string, strings.Count(path, ".")), words)}
}

// problems are the rules of a setting that it breaks, in the order its
// Validate checks them; Validate reports the first.
type problems []*FieldError

// check adds fe when its rule is broken.
func (ps *problems) check(broken bool, fe *FieldError) {
	if broken {
		*ps = append(*ps, fe)
	}
}

// under roots each problem's path at prefix ("ramp.from" under "arrival"),
// which the message names in words (`shape "s"`; "" for prefix itself).
func (ps problems) under(prefix, words string) problems {
	for i, e := range ps {
		ps[i] = &FieldError{Path: prefix + "." + e.Path, Msg: e.Msg, Valid: e.Valid, words: append([]string{words}, e.words...)}
	}
	return ps
}

// first is the first problem, nil when there is none.
func first(ps problems) error {
	if len(ps) == 0 {
		return nil
	}
	return ps[0]
}
