package openloop

import (
	"regexp"
	"strings"
)

// userinfoRE finds the userinfo of a URL (scheme://USERINFO@host): group 1
// is the scheme and "://", group 2 the userinfo.
var userinfoRE = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^/?#\s@]+)@`)

// RedactUserinfo replaces the credentials of every URL in s with "***": the
// password of http://user:PASSWORD@host, or the whole userinfo when it has
// no password (http://TOKEN@host carries a token as its user). A target URL
// may carry credentials, and records, summaries and messages name their
// target; the user name beside a password stays, as it grants nothing.
func RedactUserinfo(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	return userinfoRE.ReplaceAllStringFunc(s, func(m string) string {
		sm := userinfoRE.FindStringSubmatch(m)
		if user, _, ok := strings.Cut(sm[2], ":"); ok {
			return sm[1] + user + ":***@"
		}
		return sm[1] + "***@"
	})
}

// RedactError is err with its message's credentials redacted (as
// RedactUserinfo); err itself when it names none.
func RedactError(err error) error {
	if err == nil {
		return nil
	}
	if msg := err.Error(); RedactUserinfo(msg) != msg {
		return redactedError{RedactUserinfo(msg), err}
	}
	return err
}

// redactedError says msg and is err for errors.Is and errors.As.
type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }
