// Package shquote owns the one way mbench writes a string as a POSIX shell
// word: the rendered engine commands of a matrix, the scripts that start and
// stop processes on a host, and the commands mbench prints for the user.
package shquote

import "strings"

// Quote quotes s for a POSIX shell: words made only of safe characters are
// returned as they are, anything else in single quotes with ' written as
// '\”. The shell turns the result back into exactly s.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	safe := s[0] != '='
	for i := 0; i < len(s) && safe; i++ {
		c := s[i]
		safe = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("_@%+=:,./-", c) >= 0
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Join quotes each word and joins them with spaces: the command line a
// shell splits back into exactly words.
func Join(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = Quote(w)
	}
	return strings.Join(q, " ")
}

// Path quotes a path for a POSIX shell like Quote, but leaves a leading ~
// or ~/ bare, so that the shell expands it to the home directory of
// whoever runs the command (a remote host's, say).
func Path(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if rest == "" {
			return "~/"
		}
		return "~/" + Quote(rest)
	}
	if p == "~" {
		return p
	}
	return Quote(p)
}
