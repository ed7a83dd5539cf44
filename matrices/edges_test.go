package matrices

import (
	"strings"
	"testing"
)

// TestHostileEdges: the edges of hostile matrices get a message that names
// the line and field in the user's terms.
func TestHostileEdges(t *testing.T) {
	base := "name: n\nseed: 1\nengine: {kind: sim}\nconfigs: {a: {}}\nrates: [1]\nshapes: [{input: 8, output: 2}]\nmeasure: {min_completed: 1}\n"
	for _, c := range []struct{ name, src, want string }{
		{"zero-width space in a key", strings.Replace(base, "seed: 1", "se\u200bed: 1", 1),
			`e.yaml:2: "se\u200bed": unknown key: it holds invisible or control characters (did you mean "seed"?)`},
		{"control character", strings.Replace(base, "measure:", "mea\x01sure:", 1), "e.yaml:7: invalid YAML: control characters are not allowed (a NUL or another"},
		{"NUL", strings.Replace(base, "rates: [1]", "rates: [1]\x00", 1), "e.yaml:5: invalid YAML: control characters are not allowed"},
		{"1e400", strings.Replace(base, "rates: [1]", "rates: [1e400]", 1), "rates[0]: expected a number, got number 1e400, beyond what a float64 holds"},
		{"a field of a template variable", strings.Replace(base, "configs: {a: {}}", "configs: {a: {env: {X: '{{.Model.Foo}}'}}}", 1),
			"e.yaml:4: configs.a.env.X: template: .Model.Foo: .Model has no field Foo (a template variable is a string, number or list); valid: .Model, .Port"},
		{"CRLF in a header value", base + "request:\n  headers:\n    X-A: \"a\\r\\nX-Evil: 1\"\n",
			"e.yaml:10: request.headers.X-A: header X-A: its value has control characters; valid: a header name and a value without control characters"},
		{"deep nesting", base + "metadata: {a: " + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "}\n", "e.yaml:8: invalid YAML: exceeded max depth"},
		{"a 300-character name", strings.Replace(base, "name: n", "name: "+strings.Repeat("x", 300), 1), "valid: letters, digits, _ . - (1 to 100 of them)"},
	} {
		_, err := Parse("e.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}
	_, err := Parse("add.yaml", []byte(strings.Replace(base, "engine: {kind: sim}", "engine: {kind: sim, command: 'x --port {{add 9223372036854775807 1}}'}", 1)))
	if err == nil || !strings.Contains(err.Error(), "add.yaml:3: engine.command: template: error calling add: add 9223372036854775807 1 overflows a 64-bit integer") {
		t.Errorf("add overflow: %v", err)
	}
}
