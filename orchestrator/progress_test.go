package orchestrator

import (
	"bytes"
	"strings"
	"testing"
)

// TestProgressCountsARunOnce: an attempt run again in place is shown but
// not counted, so the counter never passes the plan's total.
func TestProgressCountsARunOnce(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, 2, false)
	p.begin("b1 a rate=1")
	p.again("NOT A RESULT (client_limited): late; running it again")
	p.begin("b1 a rate=1")
	p.finish("ok")
	p.begin("b1 b rate=1")
	p.finish("ok")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"[0/2] b1 a rate=1: launch",
		"[0/2] b1 a rate=1: NOT A RESULT (client_limited): late; running it again",
		"[0/2] b1 a rate=1: launch",
		"[1/2] b1 a rate=1: ok",
		"[1/2] b1 b rate=1: launch",
		"[2/2] b1 b rate=1: ok",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("progress printed\n%s\nwant\n%s", b.String(), strings.Join(want, "\n"))
	}
}
