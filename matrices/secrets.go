package matrices

// Secrets: which values of a matrix are secret, and redaction by field.
// Structured output (the resolved matrix, sweep.json, the matrix's copy in
// a results directory, dry runs, launch keys) replaces each secret field's
// value with "***" before anything is serialized; free text that mbench did
// not structure (an engine's log tail, an error from a host) is scrubbed of
// the secret values distinctive enough to find without altering other text.

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/mbench/mbench/openloop"
	"go.yaml.in/yaml/v3"
)

const redacted = "***"

// secretWords mark an environment variable name as secret wherever they
// appear in it (case-insensitively), unless a letter follows the word that
// makes it another one: TOKENIZERS_PARALLELISM and MAX_TOKENS are settings,
// HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY and DB_PASSWORD are not.
var secretWords = []string{"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"}

// secretEnvName reports whether an env variable's name marks its value as
// secret.
func secretEnvName(name string) bool {
	up := strings.ToUpper(name)
	for _, w := range secretWords {
		for i := 0; ; {
			j := strings.Index(up[i:], w)
			if j < 0 {
				break
			}
			end := i + j + len(w)
			rest := up[end:]
			switch {
			case rest == "" || !isLetter(rest[0]): // HF_TOKEN, API_KEY_1
				return true
			case rest[0] == 'S' && (len(rest) == 1 || !isLetter(rest[1])) && w != "TOKEN": // KEYS, SECRETS; TOKENS counts
				return true
			}
			i = end
		}
	}
	return false
}

func isLetter(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }

// minScrubbed is the shortest secret value that free text is scrubbed of:
// a shorter one ("2", "false") would take unrelated text with it. Every
// secret of any length is redacted by field.
const minScrubbed = 6

// Secrets returns every secret value of the matrix (engine, config, router
// and role env marked secret by name or by secret: true; header values; the
// API key read from request.api_key_env's variable), longest first, without
// duplicates or empties.
func (m *Matrix) Secrets() []string {
	set := map[string]bool{}
	collect := func(env map[string]EnvValue) {
		for _, v := range env {
			if v.Secret && v.Value != "" {
				set[v.Value] = true
			}
		}
	}
	collect(m.Engine.Env)
	if m.Request != nil {
		for _, v := range m.Request.Headers {
			if v != "" {
				set[v] = true
			}
		}
		if m.Request.APIKeyEnv != "" { // the API key, read from the environment at run time
			if k := os.Getenv(m.Request.APIKeyEnv); k != "" {
				set[k] = true
			}
		}
	}
	for _, c := range m.Configs {
		collect(c.Env)
		if c.Router != nil {
			collect(c.Router.Env)
		}
		if c.PD != nil {
			collect(c.PD.Producer.Env)
			collect(c.PD.Consumer.Env)
		}
	}
	return slices.SortedFunc(maps.Keys(set), func(a, b string) int {
		return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b))
	})
}

// scrubbable reports whether free text can be scrubbed of s without
// altering other text: long enough, and not a number or a boolean.
func scrubbable(s string) bool {
	if len(s) < minScrubbed {
		return false
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return false
	}
	_, err := strconv.ParseBool(s)
	return err != nil
}

// Redact scrubs free text (an engine's log tail, an error message, a line
// of mbench.log) of the matrix's secrets: every scrubbable secret value,
// and its JSON-escaped form, becomes "***", as does the password of every
// URL. Structured output never relies on it: secrets are redacted there by
// field.
func (m *Matrix) Redact(s string) string {
	for _, sec := range m.Secrets() {
		if !scrubbable(sec) {
			continue
		}
		s = strings.ReplaceAll(s, sec, redacted)
		if js, err := compactJSON(sec); err == nil && len(js) > 2 {
			if inner := js[1 : len(js)-1]; inner != sec {
				s = strings.ReplaceAll(s, inner, redacted)
			}
		}
	}
	return openloop.RedactUserinfo(s)
}

// yamlPos is a scalar's place in the matrix file.
type yamlPos struct{ line, col int }

// RedactedSource is the matrix file with every secret field's value (secret
// env values, header values) replaced by "***" and every URL's password
// redacted, in the parsed document: the text of nothing else changes
// meaning. changed reports whether anything was redacted; when nothing was,
// the file's own bytes come back.
func (m *Matrix) RedactedSource() (out []byte, changed bool, err error) {
	if len(m.secretAt) == 0 && !bytes.Contains(m.source, []byte("@")) {
		return m.source, false, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(m.source, &doc); err != nil {
		return nil, false, err
	}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode {
			if m.secretAt[yamlPos{n.Line, n.Column}] {
				n.Value, n.Style, n.Tag, changed = redacted, yaml.DoubleQuotedStyle, "!!str", true
			} else if r := openloop.RedactUserinfo(n.Value); r != n.Value {
				n.Value, changed = r, true
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&doc)
	if !changed {
		return m.source, false, nil
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, false, err
	}
	if err := enc.Close(); err != nil {
		return nil, false, err
	}
	return b.Bytes(), true, nil
}

// redactMap returns env as name → value with secrets replaced.
func redactMap(env map[string]EnvValue) map[string]any {
	out := map[string]any{}
	for k, v := range env {
		if v.Secret {
			out[k] = map[string]any{"value": redacted, "secret": true}
		} else {
			out[k] = v.Value
		}
	}
	return out
}

// hashJSON is the first n hex digits of the sha256 of v's compact JSON.
func hashJSON(v any, n int) (string, error) {
	js, err := compactJSON(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(js))
	return hex.EncodeToString(sum[:])[:n], nil
}
