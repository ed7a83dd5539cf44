package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/sshdtest"
	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/shquote"
)

// seedServe is the engine command of seeds 000/003 for instance i.
func seedServe(i int) string {
	return fmt.Sprintf("vllm serve ~/models/Qwen/Qwen3-Coder-30B-A3B-Instruct --port %d --tensor-parallel-size 1 "+
		"--enable-prefix-caching --enforce-eager --gpu-memory-utilization 0.9 --max-model-len 200000", 8000+i)
}

// dryRun runs `mbench run MATRIX --dry-run --out OUT` with $HOME pointing
// at an ssh_config in which every host of the example matrices (dash0)
// resolves to a listener that counts connections: a dry run must make none,
// and must create nothing under OUT.
func dryRun(t *testing.T, matrix string) (stdout, out string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	sshWrite(t, filepath.Join(home, ".ssh", "config"), "Host dash0\n  HostName 127.0.0.1\n  Port "+port+"\n")
	t.Setenv("HOME", home)
	out = filepath.Join(t.TempDir(), "out")
	stdout, stderr, err := runCLI(t, context.Background(), "run", matrix, "--dry-run", "--out", out)
	if err != nil {
		t.Fatalf("dry run: %v\n%s\n%s", err, stdout, stderr)
	}
	time.Sleep(50 * time.Millisecond)
	if n := accepted.Load(); n != 0 {
		t.Errorf("dry run connected to the host %d times", n)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("dry run created %s", out)
	}
	return stdout, out
}

// lines returns the output lines that start (after indentation) with
// prefix, trimmed.
func dryLines(out, substr string) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, substr) {
			ls = append(ls, strings.TrimSpace(l))
		}
	}
	return ls
}

func TestDryRunMicrobench3(t *testing.T) {
	stdout, out := dryRun(t, "../../matrices/microbench3.yaml")
	id := sweepIDOfDir("microbench3", out)
	env := "CUDA_VISIBLE_DEVICES=0 MBENCH_STEP_LOG=~/.mbench/" + id + "/steps/engine_step.0.jsonl "
	want := []string{
		env + seedServe(0),
		env + seedServe(0) + ` --kv-transfer-config '{"kv_connector":"MbenchNoopConnector","kv_connector_module_path":"mbench_vllm.noop","kv_role":"kv_both"}'`,
		env + "VLLM_MOONCAKE_BOOTSTRAP_PORT=8998 " + seedServe(0) + ` --kv-transfer-config '{"kv_connector":"MooncakeConnector","kv_connector_extra_config":{"mooncake_protocol":"rdma"},"kv_role":"kv_producer"}'`,
		env + seedServe(0) + ` --kv-transfer-config '{"kv_connector":"MooncakeConnector","kv_connector_extra_config":{"mooncake_protocol":"rdma"},"kv_role":"kv_both"}'`,
	}
	got := dryLines(stdout, "vllm serve")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("engine commands:\n%s\nwant:\n%s\nfull output:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), stdout)
	}
	if n := len(dryLines(stdout, "[gpu0 dash0] state ~/.mbench/"+id)); n != 4 {
		t.Errorf("%d host headers for gpu0 (dash0), want one per config:\n%s", n, stdout)
	}
}

// sweepIDOfDir is the sweep id a run with --out dir gets: the name and the
// first 6 bytes of the SHA-256 of the absolute directory, in hex.
func sweepIDOfDir(name, dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return name + "-" + hex.EncodeToString(sum[:6])
}

func TestDryRunPD8(t *testing.T) {
	stdout, out := dryRun(t, "../../matrices/pd8.yaml")
	state := "~/.mbench/" + sweepIDOfDir("pd8", out)
	sections := strings.Split(stdout, "\n## config ")
	if len(sections) != 4 {
		t.Fatalf("want 3 config sections (plain, mooncake_both, pd_4p4d):\n%s", stdout)
	}
	targets := func(from, to int) string {
		var u []string
		for i := from; i < to; i++ {
			u = append(u, fmt.Sprintf("http://127.0.0.1:%d", 8000+i))
		}
		return strings.Join(u, " ")
	}
	for k, sec := range sections[1:] {
		got := dryLines(sec, "vllm serve")
		if len(got) != 8 {
			t.Fatalf("config %d: %d instances, want 8:\n%s", k, len(got), sec)
		}
		for i, l := range got {
			env := fmt.Sprintf("CUDA_VISIBLE_DEVICES=%d MBENCH_STEP_LOG=%s/steps/engine_step.%d.jsonl MASTER_PORT=%d ", i, state, i, 29500+i)
			cmd := seedServe(i)
			switch {
			case k == 1:
				env += fmt.Sprintf("VLLM_MOONCAKE_BOOTSTRAP_PORT=%d ", 8998+i)
				cmd += ` --kv-transfer-config '{"kv_connector":"MooncakeConnector","kv_connector_extra_config":{"mooncake_protocol":"rdma"},"kv_role":"kv_both"}'`
			case k == 2 && i < 4:
				env += fmt.Sprintf("VLLM_MOONCAKE_BOOTSTRAP_PORT=%d ", 8998+i)
				cmd += ` --kv-transfer-config '{"kv_connector":"MooncakeConnector","kv_connector_extra_config":{"mooncake_protocol":"rdma"},"kv_role":"kv_producer"}'`
			case k == 2:
				cmd += ` --kv-transfer-config '{"kv_connector":"MooncakeConnector","kv_connector_extra_config":{"mooncake_protocol":"rdma"},"kv_role":"kv_consumer"}'`
			}
			if l != env+cmd {
				t.Errorf("config %d instance %d:\n%s\nwant\n%s%s", k, i, l, env, cmd)
			}
		}
		// The router binds where the engines do ({{.Bind}}: 127.0.0.1 or
		// 0.0.0.0, depending on how the host is reached).
		router := state + "/bin/mbench router --addr BIND:9090 --policy round_robin " + targets(0, 8)
		if k == 2 {
			router = state + "/bin/mbench router --addr BIND:9090 --policy round_robin --kv-protocol mooncake --bootstrap-ports 8998,8999,9000,9001 --prefill " +
				strings.ReplaceAll(targets(0, 4), " ", ",") + " " + targets(4, 8)
		}
		r := dryLines(sec, "mbench router")
		if len(r) == 1 {
			r[0] = strings.Replace(strings.Replace(r[0], "--addr 0.0.0.0:", "--addr BIND:", 1), "--addr 127.0.0.1:", "--addr BIND:", 1)
		}
		if len(r) != 1 || !strings.HasPrefix(r[0], router+"   # router") {
			t.Errorf("config %d router line %q, want %q", k, r, router)
		}
		if !strings.Contains(sec, "8 instance(s) started 2s apart") || !strings.Contains(sec, "load → router on gpu0:9090") {
			t.Errorf("config %d: stagger or router target not said:\n%s", k, sec)
		}
	}
	if !strings.Contains(sections[2], "bootstrap ports 8998,8999,9000,9001,9002,9003,9004,9005") {
		t.Errorf("mooncake_both: bootstrap readiness not said:\n%s", sections[2])
	}
	if !strings.Contains(sections[3], "bootstrap ports 8998,8999,9000,9001") || strings.Contains(sections[3], "9002") {
		t.Errorf("pd_4p4d: bootstrap readiness of the producers only not said:\n%s", sections[3])
	}
}

// quotingMatrix renders config args and a kv-transfer-config full of shell
// metacharacters; a secret goes in an env var and into an arg.
const quotingMatrix = `name: quoting
seed: 1
hosts:
  h: {address: local, gpus: [0]}
engine:
  kind: vllm
  command: vllm serve {{.Model}} --port {{.Port}} {{.ConfigArgs}}
  model: ~/models/my model
  env: {HF_TOKEN: hf_s3cr3t_value, PLAIN: "a b"}
configs:
  weird:
    args: ["two words", "it's \"quoted\"", "$(touch PWNED)", "` + "`touch PWNED2`" + `", "line1\nline2", "semi;colon|pipe&", "*", "--tok=hf_s3cr3t_value"]
    kv_transfer_config: {kv_connector: X, kv_role: kv_both, extra: "it's $(x) ` + "`y`" + `\nz"}
rates: [1]
shapes: [{name: s, input: 8, output: 2}]
measure: {min_completed: 1}
gate: {enabled: false}
`

// wantArgv is what vllm must receive for quotingMatrix, written out by hand.
func wantArgv(home string) []string {
	return []string{"serve", home + "/models/my model", "--port", "8000",
		"two words", `it's "quoted"`, "$(touch PWNED)", "`touch PWNED2`", "line1\nline2", "semi;colon|pipe&", "*", "--tok=hf_s3cr3t_value",
		"--kv-transfer-config", `{"extra":"it's $(x) ` + "`y`" + `\nz","kv_connector":"X","kv_role":"kv_both"}`}
}

// stubVllm puts a vllm script on a new PATH dir that writes its argv,
// NUL-separated, to $ARGV_OUT.
func stubVllm(t *testing.T) (dir string) {
	dir = t.TempDir()
	sshWrite(t, filepath.Join(dir, "vllm"), "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\000' \"$a\"; done > \"$ARGV_OUT\"\n")
	os.Chmod(filepath.Join(dir, "vllm"), 0o755)
	return dir
}

func readArgv(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the stub vllm did not run: %v", err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

func checkArgv(t *testing.T, how string, got, want []string, cwd string) {
	t.Helper()
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("%s: argv\n%q\nwant\n%q", how, got, want)
	}
	for _, f := range []string{"PWNED", "PWNED2"} {
		if _, err := os.Stat(filepath.Join(cwd, f)); err == nil {
			t.Errorf("%s: a $() or backtick in an arg was executed (%s exists)", how, f)
		}
	}
}

// TestDryRunQuoting executes the printed command line with sh, a stub vllm
// on PATH, and checks that every argument arrives intact and nothing in them
// was executed; secrets are printed as ***.
func TestDryRunQuoting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := filepath.Join(dir, "m.yaml")
	sshWrite(t, m, quotingMatrix)
	stdout, _, err := runCLI(t, context.Background(), "run", m, "--dry-run", "--out", filepath.Join(dir, "out"))
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, stdout)
	}
	if strings.Contains(stdout, "s3cr3t") || !strings.Contains(stdout, "HF_TOKEN=*** ") || !strings.Contains(stdout, "--tok=***") {
		t.Errorf("secret not redacted:\n%s", stdout)
	}
	if !strings.Contains(stdout, "PLAIN='a b' ") {
		t.Errorf("env value with a space not quoted:\n%s", stdout)
	}
	_, cmd, ok := strings.Cut(stdout, "HF_TOKEN=*** PLAIN='a b' ")
	if !ok {
		t.Fatalf("no instance line:\n%s", stdout)
	}
	cmd = strings.ReplaceAll(strings.TrimRight(cmd, "\n"), "***", "hf_s3cr3t_value")
	home, cwd, argv := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "argv")
	sh := exec.Command("sh", "-c", cmd)
	sh.Dir = cwd
	sh.Env = []string{"PATH=" + stubVllm(t) + ":/usr/bin:/bin", "HOME=" + home, "ARGV_OUT=" + argv}
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("sh -c printed command: %v\n%s\ncommand:\n%s", err, out, cmd)
	}
	checkArgv(t, "printed command through sh", readArgv(t, argv), wantArgv(home), cwd)
}

// TestSSHLaunchQuoting starts the rendered command the way a sweep does
// (Host.Start: setsid sh -c on the host) on the real sshd.
func TestSSHLaunchQuoting(t *testing.T) {
	t.Parallel()
	srv := sshdtest.Start(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "m.yaml")
	sshWrite(t, p, quotingMatrix)
	m, err := matrices.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Launch("weird", matrices.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := hosts.DialSSH(ctx, hosts.SSHConfig{Name: "q", Address: sshdtest.Alias, SSHConfigPath: srv.SSHConfigPath, KnownHosts: srv.KnownHostsPath})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	out, _, err := h.Run(ctx, `printf %s "$HOME"`)
	if err != nil {
		t.Fatal(err)
	}
	cwd, argv := t.TempDir(), filepath.Join(t.TempDir(), "argv")
	cmd := "PATH=" + shquote.Quote(stubVllm(t)) + ":$PATH; " + l.Instances[0].Command
	proc, err := h.Start(ctx, hosts.ProcSpec{Name: "quoting", Command: cmd, Dir: cwd, StateDir: filepath.Join(dir, "pids"),
		Marker: "quoting-test", Env: []hosts.Env{{Name: "ARGV_OUT", Value: argv}}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-proc.Done():
	case <-ctx.Done():
		t.Fatal("the stub vllm did not exit")
	}
	if proc.Err() != nil {
		t.Fatalf("stub vllm: %v: %s", proc.Err(), proc.LogTail(ctx, 10))
	}
	checkArgv(t, "Host.Start over ssh", readArgv(t, argv), wantArgv(string(out)), cwd)
}
