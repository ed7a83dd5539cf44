package openloop

import (
	"errors"
	"fmt"
	"strings"
)

// FieldError is a setting of a run that cannot be used. Path is the
// setting's path as the matrix names it ("arrival.ramp.from"), so that a
// caller can place it in its own terms: the matrix parser at file:line:field,
// mbench load at the flag that sets it. Msg says what is wrong and Valid,
// when set, what would do. It reads "arrival: ramp: from: <msg>".
type FieldError struct {
	Path, Msg, Valid string
}

func (e *FieldError) Error() string {
	return strings.ReplaceAll(e.Path, ".", ": ") + ": " + e.Msg
}

// fieldErr is a FieldError at path.
func fieldErr(path, valid, format string, args ...any) error {
	return &FieldError{Path: path, Msg: fmt.Sprintf(format, args...), Valid: valid}
}

// under roots a FieldError's path at prefix ("ramp.from" under "arrival");
// other errors are returned as they are.
func under(prefix string, err error) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	out := *fe
	out.Path = prefix + "." + fe.Path
	return &out
}
