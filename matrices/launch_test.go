package matrices

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/mbench/mbench/shquote"
)

// nasty strings must reach a program unchanged and execute nothing.
var nasty = []string{"", "plain", "two words", "it's", `"double"`, "$(touch /tmp/pwned-matrices)",
	"`id`", "a;b", "x\ny", "back\\slash", "$HOME", "*", "~/x", "=eq", "'", "''", "!bang", "tab\there",
	"{a,b}", "a|b&c>d<e", "ü日本", "#comment"}

func sh(t *testing.T, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sh -c %q: %v: %s", script, err, stderr.String())
	}
	return out.String()
}

// TestShellQuoteRoundTrip evaluates shquote.Quote(s) in a real shell and checks
// the shell hands back exactly s.
func TestShellQuoteRoundTrip(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	for _, s := range nasty {
		q := shquote.Quote(s)
		if got := sh(t, "printf %s "+q); got != s {
			t.Errorf("shquote.Quote(%q) = %s; the shell gave back %q", s, q, got)
		}
		// And through one more level, as a command string given to sh -c.
		if got := sh(t, `eval "printf %s $1"`, q); got != s {
			t.Errorf("shquote.Quote(%q) = %s; eval gave back %q", s, q, got)
		}
	}
	for s, want := range map[string]string{"--port": "--port", "a b": "'a b'", "it's": `'it'\''s'`, "": "''", "=x": "'=x'"} {
		if got := shquote.Quote(s); got != want {
			t.Errorf("shquote.Quote(%q) = %s, want %s", s, got, want)
		}
	}
}

// TestConfigArgsQuoting renders args and kv_transfer_config containing shell
// metacharacters and checks a shell splits them back into the exact argv.
func TestConfigArgsQuoting(t *testing.T) {
	src := `
name: q
seed: 1
hosts: {h: {address: local, gpus: [3]}}
engine: {kind: vllm, command: "printf '<%s>\n' {{.ConfigArgs}}", model: "m"}
configs:
  c:
    args: ["--name", "it's $(id) ` + "`id`" + ` ; rm -rf /", "x\ny"]
    kv_transfer_config: {kv_connector: "Conn'ector", kv_role: kv_both, kv_connector_extra_config: {path: "/a b/$(c)", n: 3, f: 0.5, ok: true, l: [1, "x"]}}
rates: [1]
shapes: [{input: 8, output: 2}]
measure: {min_completed: 1}
`
	m := mustParse(t, "q.yaml", src)
	argv, err := m.ConfigArgv("c")
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"kv_connector":"Conn'ector","kv_connector_extra_config":{"f":0.5,"l":[1,"x"],"n":3,"ok":true,"path":"/a b/$(c)"},"kv_role":"kv_both"}`
	want := []string{"--name", "it's $(id) `id` ; rm -rf /", "x\ny", "--kv-transfer-config", wantJSON}
	if strings.Join(argv, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("argv\n got %q\nwant %q", argv, want)
	}
	l, err := m.Launch("c", Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	var exp strings.Builder
	for _, a := range want {
		exp.WriteString("<" + a + ">\n")
	}
	if got := sh(t, l.Instances[0].Command); got != exp.String() {
		t.Errorf("shell saw\n%s\nwant\n%s\ncommand: %s", got, exp.String(), l.Instances[0].Command)
	}
}

// TestTemplatedEnvPerInstance: MASTER_PORT and bootstrap ports are rendered
// per instance, env values raw, command values quoted.
func TestTemplatedEnvPerInstance(t *testing.T) {
	src := `
name: e
seed: 1
hosts:
  a: {address: "me@10.0.0.5:2222", gpus: [0, 1, 2, 3]}
  b: {address: "b.example", gpus: [4, 5]}
engine:
  kind: vllm
  command: "serve {{.Model}} --port {{.Port}} --step-log {{.StepLog}} --cfg {{.Config}} --host {{.Host}}"
  model: "~/models/My Model"
  env:
    MASTER_PORT: "{{add 29500 .Instance}}"
    STEP: "{{.StepLog}}"
    DESC: "{{.Host}}/{{.Instance}} gpus={{.GPUs}}"
configs:
  mc:
    topology: {hosts: [a, b], instances_per_host: 2}
    bootstrap_port: 8998
    env: {VLLM_MOONCAKE_BOOTSTRAP_PORT: "{{.BootstrapPort}}", MASTER_PORT: "{{add 30000 .Instance}}"}
    router: {command: "proxy --port {{.RouterPort}} {{.Targets}}", port: 9090, host: a}
  mc_aa: {same_as: mc}
rates: [1]
shapes: [{input: 8, output: 2}]
measure: {min_completed: 1}
`
	m := mustParse(t, "e.yaml", src)
	l, err := m.Launch("mc_aa", Runtime{StepLog: func(h string, i int) string { return "/logs/" + h + " " + itoa(i) }})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		host         string
		port, master int
		gpus, boot   string
	}
	wants := []want{{"a", 8000, 30000, "0", "8998"}, {"a", 8001, 30001, "1", "8999"}, {"b", 8000, 30000, "4", "8998"}, {"b", 8001, 30001, "5", "8999"}}
	if len(l.Instances) != len(wants) {
		t.Fatalf("%d instances", len(l.Instances))
	}
	for i, w := range wants {
		in := l.Instances[i]
		env := envMap(in.Env)
		if in.Host != w.host || in.Port != w.port || env["MASTER_PORT"] != itoa(w.master) || env["CUDA_VISIBLE_DEVICES"] != w.gpus || env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] != w.boot {
			t.Errorf("instance %d: %+v env %v", i, in, env)
		}
		if env["STEP"] != "/logs/"+w.host+" "+itoa(in.Index) || env["DESC"] != w.host+"/"+itoa(in.Index)+" gpus="+w.gpus {
			t.Errorf("instance %d raw env: %v", i, env)
		}
		wantCmd := "serve ~/'models/My Model' --port " + itoa(w.port) + " --step-log '/logs/" + w.host + " " + itoa(in.Index) + "' --cfg mc --host " + w.host
		if in.Command != wantCmd {
			t.Errorf("instance %d command\n got %s\nwant %s", i, in.Command, wantCmd)
		}
	}
	wantRouter := "proxy --port 9090 http://127.0.0.1:8000 http://127.0.0.1:8001 http://b.example:8000 http://b.example:8001"
	if l.Router == nil || l.Router.Command != wantRouter {
		t.Errorf("router %+v\nwant %s", l.Router, wantRouter)
	}
}

// TestSecretsRedacted plants secrets by name and by flag and checks they
// never appear in Resolved, Describe or the launch key material.
func TestSecretsRedacted(t *testing.T) {
	src := `
name: s
seed: 1
engine:
  kind: sim
  env:
    HF_TOKEN: hf_s3cr3t_value
    api_key: "k\"ey<1>"
    VISIBLE: not-secret
configs:
  plain:
    env: {DB: {value: p@ss w0rd, secret: true}, LOG: {value: debug}}
rates: [1]
shapes: [{input: 8, output: 2}]
measure: {min_completed: 1}
`
	m := mustParse(t, "s.yaml", src)
	secrets := m.Secrets()
	want := []string{"hf_s3cr3t_value", "p@ss w0rd", `k"ey<1>`}
	if strings.Join(secrets, "|") != strings.Join(want, "|") {
		t.Fatalf("Secrets() = %q, want %q", secrets, want)
	}
	if got := m.Redact("token=hf_s3cr3t_value pw='p@ss w0rd' v=not-secret"); got != "token=*** pw='***' v=not-secret" {
		t.Errorf("Redact: %s", got)
	}
	res, err := m.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	var desc strings.Builder
	if err := m.Describe(&desc); err != nil {
		t.Fatal(err)
	}
	l, _ := m.Launch("plain", Runtime{})
	for _, out := range []string{string(res), desc.String(), m.Redact(strings.Join(quoteEnv(l.Instances[0].Env), " "))} {
		for _, s := range append(want, `k\"ey`, "s3cr3t", "w0rd") {
			if strings.Contains(out, s) {
				t.Errorf("secret %q leaked into:\n%s", s, out)
			}
		}
	}
	if !strings.Contains(string(res), "not-secret") {
		t.Error("a non-secret env value was redacted")
	}
	if env := envMap(l.Instances[0].Env); env["HF_TOKEN"] != "hf_s3cr3t_value" || env["LOG"] != "debug" {
		t.Errorf("launch env must carry the real values: %v", env)
	}
}

func quoteEnv(env []EnvVar) []string {
	var out []string
	for _, e := range env {
		out = append(out, e.Name+"="+shquote.Quote(e.Value))
	}
	return out
}
