package shquote

import (
	"os/exec"
	"testing"
)

// TestQuoteRoundTrip: sh turns every quoted word back into exactly the
// original string.
func TestQuoteRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", "a b", "it's", `"dq"`, "$(id)", "`id`", "a;b", "new\nline", "=x", "~/x", "é ü", "\\", "*?[]", "-n"} {
		out, err := exec.Command("sh", "-c", `printf '%s' `+Quote(s)).Output()
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if string(out) != s {
			t.Errorf("Quote(%q) = %s, the shell reads %q", s, Quote(s), out)
		}
	}
}

func FuzzQuote(f *testing.F) {
	f.Add("it's $(x)")
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 200 {
			return
		}
		for i := 0; i < len(s); i++ {
			if s[i] == 0 {
				return // no NUL in a shell word
			}
		}
		out, err := exec.Command("sh", "-c", `printf '%s' `+Quote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("Quote(%q) = %s, the shell reads %q (%v)", s, Quote(s), out, err)
		}
	})
}

// TestJoinRoundTrip: sh splits a joined command line back into exactly its
// words.
func TestJoinRoundTrip(t *testing.T) {
	words := []string{"srun", "--job-name=it's", "", "a b", "$(id)", "new\nline"}
	out, err := exec.Command("sh", "-c", `for w in `+Join(words)+`; do printf '[%s]' "$w"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, w := range words {
		want += "[" + w + "]"
	}
	if string(out) != want {
		t.Errorf("Join(%q) = %s, the shell reads %s", words, Join(words), out)
	}
}

// TestPathExpandsHome: sh expands Path's leading ~ to $HOME and reads the
// rest back exactly.
func TestPathExpandsHome(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"~", "/home/x"}, {"~/", "/home/x/"}, {"~/a b/it's", "/home/x/a b/it's"}, {"/abs/~/x", "/abs/~/x"}, {"~user", "~user"},
	} {
		cmd := exec.Command("sh", "-c", `printf '%s' `+Path(c.in))
		cmd.Env = []string{"HOME=/home/x"}
		out, err := cmd.Output()
		if err != nil || string(out) != c.want {
			t.Errorf("Path(%q) = %s: the shell reads %q (%v), want %q", c.in, Path(c.in), out, err, c.want)
		}
	}
}
