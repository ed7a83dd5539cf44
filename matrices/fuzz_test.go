package matrices

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzParse: Parse never panics; a rejected input yields well-formed
// Errors; an accepted matrix expands, resolves, estimates, describes and
// launches every config without error.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"*.yaml", "testdata/bad/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, p := range files {
			if data, err := os.ReadFile(p); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(baseYAML))
	f.Add([]byte(slurmBase))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("<<: {name: x}\nseed: 1\n"))
	f.Add([]byte("name: x\nseed: 1\nengine: {kind: sim, command: '{{if .Port}}{{.Model}}{{else}}x{{end}}'}\nconfigs: {p: }\nrates: [1]\nshapes: [{input: 1, output: 1}]\nmeasure: {min_completed: 1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				panic(fmt.Sprintf("FuzzParse: slow input %q", data))
			}
		}()
		m, err := Parse("f.yaml", data)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T %v is not a non-empty Errors", err, err)
			}
			for _, e := range es {
				if e.File != "f.yaml" || e.Error() == "" {
					t.Fatalf("malformed problem %#v", e)
				}
			}
			return
		}
		if m == nil {
			t.Fatal("nil matrix without error")
		}
		cells := m.Cells()
		if len(cells) == 0 && m.Capacity == nil {
			t.Fatal("valid matrix without cells")
		}
		if _, err := m.Resolved(); err != nil {
			t.Fatalf("Resolved: %v", err)
		}
		if m.EstimateDuration() < 0 {
			t.Fatal("negative estimate")
		}
		for _, name := range m.ConfigOrder {
			if _, err := m.Launch(name, Runtime{}); err != nil {
				t.Fatalf("validated config %s does not launch: %v", name, err)
			}
		}
		if err := m.Describe(io.Discard); err != nil {
			t.Fatalf("Describe: %v", err)
		}
	})
}

// TestAliasBombBounded: exponential alias expansion is cut off: the bomb
// below expands to 10^9 leaves, which no machine parses in a test's time,
// so a parse that returns (with an error) is the cut-off's.
func TestAliasBombBounded(t *testing.T) {
	src := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for _, n := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		src += n + ": &" + n + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n"
		prev = n
	}
	src += "name: t\nseed: 1\nhosts: {h: {address: local, gpus: [0]}}\nengine: {kind: vllm, command: x, model: m}\n" +
		"configs: {c: {kv_transfer_config: {kv_connector: x, kv_role: kv_both, big: *i}, args: *i}}\n" +
		"rates: *i\nshapes: [{input: 1, output: 1}]\nmeasure: {min_completed: 1}\n"
	if _, err := Parse("bomb.yaml", []byte(src)); err == nil {
		t.Fatal("alias bomb accepted")
	}
}
