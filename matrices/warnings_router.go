package matrices

import (
	"fmt"
	"slices"
	"strings"
)

// routerWarnings checks the configs whose router is `mbench router` for
// settings the matrix has and the router command does not pass on.
func (m *Matrix) routerWarnings() []Warning {
	var ws []Warning
	for _, name := range m.ConfigOrder {
		c := m.Configs[name]
		if c.Router == nil || c.SameAs != "" || !isMbenchRouter(c.Router.Command) {
			continue
		}
		field := "configs." + name + ".router.command"
		line := m.lines[field]
		cmd := c.Router.Command
		if m.ClassBounds != [3]int{} && !strings.Contains(cmd, "--class-bounds") {
			ws = append(ws, Warning{Line: line, Field: field,
				Msg: fmt.Sprintf("class_bounds is %v but the router classifies by its default 5000,20000,50000 (routing.jsonl, breakdown.json): add --class-bounds {{.ClassBounds}}", m.ClassBounds)})
		}
		splits := strings.Contains(cmd, "--offload") || strings.Contains(cmd, "--prefill")
		mooncakeRouter := strings.Contains(cmd, "--kv-protocol mooncake") || strings.Contains(cmd, "--kv-protocol=mooncake")
		switch {
		case !splits:
		case m.usesMooncake(c) && !mooncakeRouter:
			ws = append(ws, Warning{Line: line, Field: field,
				Msg: "the instances run the MooncakeConnector, whose prefill answers no kv_transfer_params (vLLM ≥ PR #31034): every split request will fail with 502; add --kv-protocol mooncake --bootstrap-ports {{.BootstrapPorts}}"})
		case mooncakeRouter && c.BootstrapPort == 0:
			ws = append(ws, Warning{Line: m.lines["configs."+name], Field: "configs." + name + ".bootstrap_port",
				Msg: "the router speaks the Mooncake bootstrap protocol but the config has no bootstrap_port: the sweep does not wait for the bootstrap servers, and each instance's VLLM_MOONCAKE_BOOTSTRAP_PORT is its default 8998; set bootstrap_port and env VLLM_MOONCAKE_BOOTSTRAP_PORT: \"{{.BootstrapPort}}\""})
		case mooncakeRouter && !strings.Contains(cmd, "--bootstrap-ports"):
			ws = append(ws, Warning{Line: line, Field: field,
				Msg: "the router speaks the Mooncake bootstrap protocol without --bootstrap-ports: it assumes 8998 for every instance; add --bootstrap-ports {{.BootstrapPorts}}"})
		}
	}
	return ws
}

// usesMooncake reports whether a config's instances (any PD role) run vLLM's
// MooncakeConnector or the sim's model of it.
func (m *Matrix) usesMooncake(c *Config) bool {
	kvs := []map[string]any{c.KVTransferConfig}
	sims := []map[string]string{m.Engine.Sim, c.Sim}
	if c.PD != nil {
		kvs = append(kvs, c.PD.Producer.KVTransferConfig, c.PD.Consumer.KVTransferConfig)
		sims = append(sims, c.PD.Producer.Sim, c.PD.Consumer.Sim)
	}
	return slices.ContainsFunc(kvs, func(kv map[string]any) bool { return kv["kv_connector"] == "MooncakeConnector" }) ||
		slices.ContainsFunc(sims, func(sim map[string]string) bool { return sim["kv_connector"] == "MooncakeConnector" })
}

// isMbenchRouter reports whether a router command runs `mbench router`.
func isMbenchRouter(command string) bool {
	f := strings.Fields(command)
	for i := 0; i+1 < len(f); i++ {
		if f[i+1] == "router" && (f[i] == "{{.Self}}" || strings.HasSuffix(f[i], "mbench")) {
			return true
		}
	}
	return false
}
