package matrices

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestExampleMatricesValidate loads every shipped matrices/*.yaml.
func TestExampleMatricesValidate(t *testing.T) {
	files, _ := filepath.Glob("*.yaml")
	if len(files) < 3 {
		t.Fatalf("want sim.yaml, microbench3.yaml, pd8.yaml; found %v", files)
	}
	for _, f := range files {
		m, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(m.Cells()) == 0 || m.Hash == "" {
			t.Errorf("%s: no cells or no hash", f)
		}
		var b strings.Builder
		if err := m.Describe(&b); err != nil {
			t.Errorf("%s: Describe: %v", f, err)
		}
	}
}

func mustParse(t *testing.T, file, src string) *Matrix {
	t.Helper()
	m, err := Parse(file, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustLoad(t *testing.T, path string) *Matrix {
	t.Helper()
	m, err := Load(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// TestSimMatrix checks the embedded default: kind sim, the seed's configs
// plus an A/A twin, ttft_p90 as the primary metric, a first stage of two
// mirror-image pairs of blocks, a sweep estimated under 3 minutes.
func TestSimMatrix(t *testing.T) {
	m := mustLoad(t, "sim.yaml")
	want := []string{"plain", "noop_connector", "mooncake_producer", "mooncake_both", "plain_aa"}
	if strings.Join(m.ConfigOrder, ",") != strings.Join(want, ",") {
		t.Errorf("configs %v, want %v", m.ConfigOrder, want)
	}
	if m.Engine.Kind != "sim" || len(m.Rates) != 1 || m.Repeat.Min != 4 || m.Repeat.Max < m.Repeat.Min || m.Repeat.Metric != "ttft_p90" {
		t.Errorf("kind %s rates %v repeat %+v", m.Engine.Kind, m.Rates, m.Repeat)
	}
	if m.Configs["plain_aa"].SameAs != "plain" {
		t.Errorf("plain_aa.SameAs = %q", m.Configs["plain_aa"].SameAs)
	}
	if est := m.EstimateDuration(); est <= 0 || est > 3*time.Minute {
		t.Errorf("estimated duration %v, want ≤ 3m", est)
	}
	argv, err := m.ConfigArgv("noop_connector")
	if err != nil || !strings.Contains(strings.Join(argv, " "), "--connector=constant --connector-us=16") {
		t.Errorf("noop_connector argv %q (%v)", argv, err)
	}
}

// TestMicrobench3Matrix checks seed 000's Phase A.
func TestMicrobench3Matrix(t *testing.T) {
	m := mustLoad(t, "microbench3.yaml")
	if got := len(m.Cells()); got != 12 {
		t.Errorf("%d cells, want 4 configs × 3 rates × 1 shape = 12", got)
	}
	if m.Measure.MinCompleted != 200 || m.Measure.WarmupRequests != 20 || m.Engine.ReadyTimeout != 15*time.Minute || !m.Engine.Instrument {
		t.Errorf("measure %+v engine %+v", m.Measure, m.Engine)
	}
	l, err := m.Launch("noop_connector", Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	want := `vllm serve ~/models/Qwen/Qwen3-Coder-30B-A3B-Instruct --port 8000 --tensor-parallel-size 1 --enable-prefix-caching --enforce-eager --gpu-memory-utilization 0.9 --max-model-len 200000 --kv-transfer-config '{"kv_connector":"MbenchNoopConnector","kv_connector_module_path":"mbench_vllm.noop","kv_role":"kv_both"}'`
	if l.Instances[0].Command != want {
		t.Errorf("command\n got %s\nwant %s", l.Instances[0].Command, want)
	}
	if env := envMap(l.Instances[0].Env); env["CUDA_VISIBLE_DEVICES"] != "0" {
		t.Errorf("env %v", env)
	}
	lp, err := m.Launch("mooncake_producer", Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	if env := envMap(lp.Instances[0].Env); env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] != "8998" {
		t.Errorf("mooncake_producer env %v", env)
	}
}

func envMap(env []EnvVar) map[string]string {
	out := map[string]string{}
	for _, e := range env {
		out[e.Name] = e.Value
	}
	return out
}

// TestPD8Matrix checks seed 001's 8×TP1: one GPU, port, MASTER_PORT and
// bootstrap port per instance, 2 s stagger, a router over all 8.
func TestPD8Matrix(t *testing.T) {
	m := mustLoad(t, "pd8.yaml")
	l, err := m.Launch("mooncake_both", Runtime{StepLog: func(h string, i int) string { return "/r/" + h + "/" + string(rune('0'+i)) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Instances) != 8 || l.Stagger != 2*time.Second || l.Router == nil {
		t.Fatalf("instances %d stagger %v router %v", len(l.Instances), l.Stagger, l.Router)
	}
	var targets []string
	for i, in := range l.Instances {
		env := envMap(in.Env)
		if in.Port != 8000+i || in.BootstrapPort != 8998+i || len(in.GPUs) != 1 || in.GPUs[0] != i {
			t.Errorf("instance %d: port %d bootstrap %d gpus %v", i, in.Port, in.BootstrapPort, in.GPUs)
		}
		if env["MASTER_PORT"] != itoa(29500+i) || env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] != itoa(8998+i) || env["CUDA_VISIBLE_DEVICES"] != itoa(i) {
			t.Errorf("instance %d env %v", i, env)
		}
		if in.StepLog != "/r/gpu0/"+itoa(i) || env[StepLogEnv] != in.StepLog {
			t.Errorf("instance %d step log %q env %q", i, in.StepLog, env[StepLogEnv])
		}
		targets = append(targets, "http://127.0.0.1:"+itoa(8000+i))
	}
	want := "mbench router --addr 127.0.0.1:9090 --policy round_robin " + strings.Join(targets, " ")
	if l.Router.Command != want || l.Router.Port != 9090 || l.Router.Host != "gpu0" {
		t.Errorf("router %+v\nwant command %s", l.Router, want)
	}
	if got := m.Rates; len(got) != 3 || got[0] != 32 || got[2] != 128 {
		t.Errorf("rates %v", got)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestPD8Bootstrap: pd8's 4P+4D renders producers and consumers with their
// own kv_role, only the producers get a bootstrap port (readiness polled,
// VLLM_MOONCAKE_BOOTSTRAP_PORT set), and the router gets the producers as
// --prefill with their bootstrap ports, the consumers as targets, and the
// Mooncake protocol; agentic8's elastic config passes every instance's
// bootstrap port to its offloading router.
func TestPD8Bootstrap(t *testing.T) {
	m := mustLoad(t, "pd8.yaml")
	l, err := m.Launch("pd_4p4d", Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	var prod, cons []string
	for i, in := range l.Instances {
		env := envMap(in.Env)
		u := "http://127.0.0.1:" + itoa(8000+i)
		switch {
		case i < 4:
			if in.Role != RoleProducer || !strings.Contains(in.Command, `"kv_role":"kv_producer"`) ||
				env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] != itoa(8998+i) || in.BootstrapPort != 8998+i {
				t.Errorf("instance %d: role %q bootstrap %d env %v command %s", i, in.Role, in.BootstrapPort, env, in.Command)
			}
			prod = append(prod, u)
		default:
			if in.Role != RoleConsumer || !strings.Contains(in.Command, `"kv_role":"kv_consumer"`) ||
				env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] != "" || in.BootstrapPort != 0 {
				t.Errorf("instance %d: role %q bootstrap %d env %v command %s", i, in.Role, in.BootstrapPort, env, in.Command)
			}
			cons = append(cons, u)
		}
	}
	want := "mbench router --addr 127.0.0.1:9090 --policy round_robin --kv-protocol mooncake --bootstrap-ports 8998,8999,9000,9001 --prefill " +
		strings.Join(prod, ",") + " " + strings.Join(cons, " ")
	if l.Router == nil || l.Router.Command != want {
		t.Errorf("router %+v\nwant %s", l.Router, want)
	}
	a8 := mustLoad(t, "agentic8.yaml")
	el, err := a8.Launch("elastic", Runtime{})
	if err != nil || !strings.Contains(el.Router.Command, "--offload --heavy-threshold 20000 --max-offload 4 --kv-protocol mooncake --bootstrap-ports 8998,8999,9000,9001,9002,9003,9004,9005 ") ||
		!strings.Contains(el.Router.Command, "--class-bounds 5000,20000,50000") {
		t.Errorf("elastic router %v %v", el, err)
	}
	if ws := a8.Warnings(); len(ws) > 0 {
		t.Errorf("agentic8.yaml warnings: %v", ws)
	}
}

// TestPDMatrixErrors: a PD topology needs a router and a consumer.
func TestPDMatrixErrors(t *testing.T) {
	const base = "name: t\nseed: 1\nengine: {kind: sim}\nrates: [1]\nshapes: [{input: 16, output: 4}]\nmeasure: {min_completed: 10}\nconfigs:\n  pd:\n    topology: {instances_per_host: 2}\n"
	for _, tc := range []struct{ extra, want string }{
		{"    pd: {producers: 1, producer: {sim: {kv_role: kv_producer}}, consumer: {}}\n", "needs a router"},
		{"    pd: {producers: 2, producer: {}, consumer: {}}\n    router: {command: x, port: 9}\n", "leave no consumer"},
		{"    pd: {producers: 1, producer: {kv_transfer_config: {kv_connector: X, kv_role: kv_producer}}, consumer: {}}\n    router: {command: x, port: 9}\n", "applies to engine.kind vllm"},
		{"    pd: {producer: {}, consumer: {}}\n    router: {command: x, port: 9}\n", "producers"},
	} {
		_, err := Parse("m.yaml", []byte(base+tc.extra))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.extra, err, tc.want)
		}
	}
}
