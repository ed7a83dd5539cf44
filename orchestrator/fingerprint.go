package orchestrator

import (
	"sort"
	"strings"
	"time"

	"github.com/mbench/mbench/probes"
)

// localGPUFingerprint names this machine's GPUs, when NVML works.
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
	sort.Strings(names)
	return map[string]string{"gpus": strings.Join(names, ",")}
}
