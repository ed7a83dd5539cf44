package orchestrator

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mbench/mbench/probes"
)

// localGPUFingerprint names this machine's GPUs and NVML driver, when NVML
// works.
func localGPUFingerprint() map[string]string {
	lib, shutdown, err := probes.OpenNVML()
	if err != nil {
		return map[string]string{"gpus": "none"}
	}
	defer shutdown()
	samples, err := probes.NewSampler(lib, "local", time.Second, nil).SampleGPUs()
	if err != nil || len(samples) == 0 {
		return map[string]string{"gpus": "none"}
	}
	var names []string
	for _, s := range samples {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	fp := map[string]string{"gpus": strings.Join(names, ",")}
	if v, ret := lib.SystemGetDriverVersion(); ret == 0 {
		fp["gpu_driver"] = v
	}
	return fp
}

// recordEngineVersion records the engine's version v in the fingerprint,
// and refuses to mix results with another version unless forced.
func (st *store) recordEngineVersion(v string, force bool) error {
	old, had := st.state.Fingerprint["engine_version"]
	if had && old != v && !force {
		return fmt.Errorf("%w: engine version changed from %q to %q; results would mix two engines (use --force to accept)", errFingerprint, old, v)
	}
	if !had || old != v {
		st.state.Fingerprint["engine_version"] = v
		return st.save()
	}
	return nil
}

// checkRunGPUs records, per host, the GPUs a run's probes saw (gpu.jsonl),
// and refuses to go on when a host's GPUs differ from those recorded by
// earlier runs of the sweep, unless forced: results from two kinds of GPU
// must not mix. Remote hosts are covered here; this machine's GPUs are in
// the fingerprint from the start.
func (st *store) checkRunGPUs(dir string, force bool) error {
	f, err := os.Open(filepath.Join(dir, "gpu.jsonl"))
	if err != nil {
		return nil // no GPU samples: nothing to compare
	}
	defer f.Close()
	samples, err := probes.ReadGPUSamples(f)
	if err != nil {
		return nil
	}
	byHost := map[string]map[int]string{}
	for _, g := range samples {
		if byHost[g.Host] == nil {
			byHost[g.Host] = map[int]string{}
		}
		byHost[g.Host][g.GPU] = g.Name
	}
	changed := false
	for host, gpus := range byHost {
		var names []string
		for _, i := range slices.Sorted(maps.Keys(gpus)) {
			names = append(names, gpus[i])
		}
		key, now := "gpus@"+host, strings.Join(names, ",")
		old, had := st.state.Fingerprint[key]
		if had && old != now && !force {
			return fmt.Errorf("%w: host %s had GPUs %q, now %q; refusing to mix results (use --force to accept)", errFingerprint, host, old, now)
		}
		if old != now {
			st.state.Fingerprint[key], changed = now, true
		}
	}
	if changed {
		return st.save()
	}
	return nil
}
