package hosts

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kevinburke/ssh_config"
	"github.com/mbench/mbench/shquote"
)

func TestParseAddress(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, user, host, port, err string }{
		{in: "dash0", host: "dash0"},
		{in: "bob@dash0:2222", user: "bob", host: "dash0", port: "2222"},
		{in: "a@b@host", user: "a@b", host: "host"},
		{in: "[::1]:22", host: "::1", port: "22"},
		{in: "::1", host: "::1"},
		{in: "host:0", err: "invalid port"},
		{in: "host:x", err: "invalid port"},
		{in: "@host", err: "empty user"},
		{in: "", err: "invalid host"},
		{in: "h;rm -rf /", err: "invalid host"},
		{in: "[::1", err: "missing ']'"},
	}
	for _, c := range cases {
		u, h, p, err := parseAddress(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || u != c.user || h != c.host || p != c.port {
			t.Errorf("%q = %q %q %q %v", c.in, u, h, p, err)
		}
	}
}

func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"dash0", "u@h:22", "[::1]:2", "a@@b", "h:99999", "[x]y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, h, p, err := parseAddress(s)
		if err == nil && (h == "" || strings.ContainsAny(h, " ;'$")) {
			t.Fatalf("%q accepted with host %q port %q", s, h, p)
		}
	})
}

func TestResolve(t *testing.T) {
	t.Parallel()
	c, err := ssh_config.DecodeBytes([]byte(`
Host gpu*
  HostName %h.cluster.example
  User alice
  Port 2200
  IdentityFile ~/.ssh/gpu_key
  IdentityFile /keys/%r_%h
  ProxyJump bastion
  UserKnownHostsFile /kh/%n
Host bastion
  HostName 10.0.0.1
`))
	if err != nil {
		t.Fatal(err)
	}
	ep, err := resolve(c, "gpu3")
	if err != nil {
		t.Fatal(err)
	}
	want := endpoint{alias: "gpu3", host: "gpu3.cluster.example", port: "2200", user: "alice",
		identities: []string{homeDir() + "/.ssh/gpu_key", "/keys/alice_gpu3.cluster.example"}, jump: "bastion", knownHosts: "/kh/gpu3"}
	if strings.Join(ep.identities, ",") != strings.Join(want.identities, ",") {
		t.Fatalf("identities %v, want %v", ep.identities, want.identities)
	}
	ep.identities, want.identities = nil, nil
	if !reflect.DeepEqual(ep, want) {
		t.Fatalf("resolve = %+v, want %+v", ep, want)
	}
	ep, _ = resolve(c, "bob@gpu3:22")
	if ep.user != "bob" || ep.port != "22" {
		t.Fatalf("address must win over ssh_config: %+v", ep)
	}
	ep, _ = resolve(c, "other")
	if ep.host != "other" || ep.port != "22" || ep.user != localUser() || ep.jump != "" {
		t.Fatalf("defaults: %+v", ep)
	}
}

// FuzzQuote: a quoted value reaches a command unchanged and executes nothing.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "a b", "'", `"$(touch x)"`, "`id`;\n$HOME", `\'\\`, "ü日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
			return
		}
		out, err := exec.Command("sh", "-c", "printf %s "+shquote.Quote(s)).Output()
		if err != nil || string(out) != s {
			t.Fatalf("shquote.Quote(%q) gave %q, %v", s, out, err)
		}
	})
}

func TestQuotePath(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("sh", "-c", "printf %s "+quotePath("~/a b/'c'")).Output()
	if err != nil || string(out) != os.Getenv("HOME")+"/a b/'c'" {
		t.Fatalf("got %q %v", out, err)
	}
}

// TestOddProcessName: /proc/<pid>/stat is parsed correctly when the command
// name contains ") " and spaces.
func TestOddProcessName(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 20*time.Second)
	bin := filepath.Join(t.TempDir(), "x) y (z")
	sleep, _ := exec.LookPath("sleep")
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	h := NewLocal()
	spec := testSpec(t, "odd", "exec "+shquote.Quote(bin)+" 1000")
	p, err := h.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	ls, err := FindLeftovers(ctx, h, spec.StateDir, testMarker)
	if err != nil || len(ls) != 1 {
		t.Fatalf("FindLeftovers = %+v, %v", ls, err)
	}
	if err := p.Stop(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	waitGone(t, p.Pid(), time.Minute)
}
