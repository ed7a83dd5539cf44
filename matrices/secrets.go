package matrices

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"sort"
	"strings"
)

const redacted = "***"

// Secrets returns every secret env value of the matrix (engine, config and
// router env whose name matches TOKEN|KEY|SECRET|PASSWORD case-insensitively,
// or marked secret: true), longest first, without duplicates or empties.
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
	if m.Request != nil && m.Request.APIKeyEnv != "" { // the API key, read from the environment at run time
		if k := os.Getenv(m.Request.APIKeyEnv); k != "" {
			set[k] = true
		}
	}
	for _, c := range m.Configs {
		collect(c.Env)
		if c.Router != nil {
			collect(c.Router.Env)
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) > len(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

// Redact replaces every secret value in s with "***". It also catches the
// JSON-escaped form of each secret.
func (m *Matrix) Redact(s string) string {
	for _, sec := range m.Secrets() {
		s = strings.ReplaceAll(s, sec, redacted)
		if js, err := compactJSON(sec); err == nil && len(js) > 2 {
			if inner := js[1 : len(js)-1]; inner != sec {
				s = strings.ReplaceAll(s, inner, redacted)
			}
		}
	}
	return s
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
