package matrices

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSecretEnvName(t *testing.T) {
	for name, want := range map[string]bool{
		"HF_TOKEN": true, "HUGGING_FACE_HUB_TOKEN": true, "OPENAI_API_KEY": true, "api_key": true, "AWS_SECRET_ACCESS_KEY": true,
		"DB_PASSWORD": true, "PGPASSWD": true, "GITHUB_TOKEN_2": true, "API_KEYS": true, "MY_SECRETS": true, "GCP_CREDENTIALS": true,
		"HFTOKEN": true, "KEY": true,
		"TOKENIZERS_PARALLELISM": false, "MAX_TOKENS": false, "VLLM_MAX_TOKENS_PER_STEP": false, "KEYBOARD": false,
		"LOG": false, "CUDA_LAUNCH_BLOCKING": false,
	} {
		if got := secretEnvName(name); got != want {
			t.Errorf("secretEnvName(%q) = %v, want %v", name, got, want)
		}
	}
}

// secretShapes is a matrix carrying a secret of every shape: short values
// that occur elsewhere in the file as other fields' text ("false", "2",
// "8"), values with quotes and YAML syntax, a value shared through an
// anchor, header values, a URL with a password, and a setting whose name
// only looks like a secret's.
const secretShapes = `
name: shapes
seed: 1
engine:
  kind: sim
  port: 23684
  env:
    TOKENIZERS_PARALLELISM: "false"
    FLAG_KEY: "false"
    API_KEY: "2"
    HF_TOKEN: &tok 'hf_pl4nted: "x" #y'
    OTHER_TOKEN: *tok
configs:
  a:
    env: {DB: {value: "8", secret: true}, LOG: {value: debug}}
rates: [2, 8]
shapes: [{input: 8, output: 2}]
measure: {min_completed: 2}
gate: {enabled: false}
request:
  headers: {X-Api-Key: sk-head3r-value, X-Short: "2"}
metadata:
  endpoint_note: http://alice:pa55w0rd@proxy.example:3128/
`

func TestRedactionByField(t *testing.T) {
	m := mustParse(t, "shapes.yaml", secretShapes)
	if m.Engine.Env["TOKENIZERS_PARALLELISM"].Secret {
		t.Error("TOKENIZERS_PARALLELISM is a setting, not a secret")
	}
	res, err := m.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(res, &doc); err != nil {
		t.Fatalf("the resolved matrix is not JSON: %v\n%s", err, res)
	}
	eng := doc["engine"].(map[string]any)
	env := eng["env"].(map[string]any)
	if env["TOKENIZERS_PARALLELISM"] != "false" || eng["port"] != float64(23684) {
		t.Errorf("a setting was altered: TOKENIZERS_PARALLELISM=%v port=%v", env["TOKENIZERS_PARALLELISM"], eng["port"])
	}
	for _, k := range []string{"FLAG_KEY", "API_KEY", "HF_TOKEN", "OTHER_TOKEN"} {
		if v, _ := env[k].(map[string]any); v["value"] != "***" {
			t.Errorf("engine.env.%s resolved as %v", k, env[k])
		}
	}
	for _, s := range []string{"pl4nted", "sk-head3r", "pa55w0rd"} {
		if strings.Contains(string(res), s) {
			t.Errorf("the resolved matrix contains %q", s)
		}
	}

	red, changed, err := m.RedactedSource()
	if err != nil || !changed {
		t.Fatalf("RedactedSource: changed=%v err=%v", changed, err)
	}
	for _, s := range []string{"pl4nted", "sk-head3r", "pa55w0rd"} {
		if strings.Contains(string(red), s) {
			t.Errorf("the redacted copy contains %q:\n%s", s, red)
		}
	}
	c := mustParse(t, "copy.yaml", string(red))
	if c.Hash != m.Hash {
		t.Errorf("the redacted copy hashes to %s, the matrix to %s: a resume from the copy would refuse", c.Hash, m.Hash)
	}
	if c.Engine.Port != 23684 || c.Engine.Env["TOKENIZERS_PARALLELISM"].Value != "false" || c.Configs["a"].Env["LOG"].Value != "debug" ||
		c.Request.Headers["X-Short"] != "***" || c.Configs["a"].Env["DB"].Value != "***" || c.Engine.Env["API_KEY"].Value != "***" ||
		c.Metadata["endpoint_note"] != "http://alice:***@proxy.example:3128/" {
		t.Errorf("the redacted copy changed the wrong fields:\n%s", red)
	}
	if plain := mustParse(t, "p.yaml", strings.Replace(secretShapes[:strings.Index(secretShapes, "request:")], "FLAG_KEY", "FLAG", 1)); plain.Hash == m.Hash {
		t.Error("the hash ignores the request section and the secret flag")
	}

	// Free text: the distinctive secrets go, short and literal ones cannot
	// be told from other text and stay.
	line := `engine said: token hf_pl4nted: "x" #y, header sk-head3r-value, false 2 8, proxy http://alice:pa55w0rd@proxy.example:3128/`
	want := `engine said: token ***, header ***, false 2 8, proxy http://alice:***@proxy.example:3128/`
	if got := m.Redact(line); got != want {
		t.Errorf("Redact:\n got %s\nwant %s", got, want)
	}
}

func TestRedactedSourceUnchangedWithoutSecrets(t *testing.T) {
	src := "name: n\nseed: 1\nengine: {kind: sim}\nconfigs: {a: {}}\nrates: [1]\nshapes: [{input: 8, output: 2}]\nmeasure: {min_completed: 1}\n# a comment\n"
	m := mustParse(t, "n.yaml", src)
	out, changed, err := m.RedactedSource()
	if err != nil || changed || string(out) != src {
		t.Errorf("RedactedSource of a matrix without secrets: changed=%v err=%v\n%s", changed, err, out)
	}
}
