package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/shquote"
	"github.com/mbench/mbench/vllm"
)

// installPlugin copies the mbench_vllm package under the sweep's state
// directory on a host and checks it against the engine's Python. The engine
// then finds the plugin through PYTHONPATH (see instrumentCommand).
func (f *fleet) installPlugin(ctx context.Context, hostName string, h hosts.Host) error {
	dir := f.path(hostName, "mbench_vllm")
	err := fs.WalkDir(vllm.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(vllm.Files, p)
		if err != nil {
			return err
		}
		return h.Put(ctx, bytes.NewReader(data), path.Join(dir, p), 0o644)
	})
	if err != nil {
		return fmt.Errorf("host %s: install mbench_vllm in %s: %w", hostName, dir, err)
	}
	f.pluginDir[hostName] = dir
	out, _, err := h.Run(ctx, "PYTHONPATH="+shquote.Quote(dir)+"${PYTHONPATH:+:$PYTHONPATH} python3 -m mbench_vllm.check 2>&1")
	if err != nil {
		f.logf("host %s: mbench_vllm self-check says some step timers will be absent:\n%s", hostName, strings.TrimSpace(string(out)))
	} else {
		f.logf("host %s: mbench_vllm installed; self-check ok", hostName)
	}
	return nil
}

// instrumentCommand prefixes an engine command so the plugin loads:
// PYTHONPATH gains the package, and an existing VLLM_PLUGINS filter gains
// mbench_steps (setting it outright would drop the user's other plugins).
func instrumentCommand(pluginDir, command string) string {
	return "export PYTHONPATH=" + shquote.Quote(pluginDir) + "${PYTHONPATH:+:$PYTHONPATH}; " +
		`if [ -n "${VLLM_PLUGINS+x}" ]; then export VLLM_PLUGINS="${VLLM_PLUGINS:+$VLLM_PLUGINS,}mbench_steps"; fi; ` +
		command
}

// workerLogs lists the per-pid worker step files next to a step log.
func workerLogs(ctx context.Context, h hosts.Host, stepLog string) []string {
	base := strings.TrimSuffix(stepLog, ".jsonl")
	out, _, err := h.Run(ctx, "ls -1 "+shquote.Quote(base)+".worker.*.jsonl 2>/dev/null || true")
	if err != nil {
		return nil
	}
	return slices.DeleteFunc(strings.Split(strings.TrimSpace(string(out)), "\n"), func(l string) bool { return l == "" })
}
