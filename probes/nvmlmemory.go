package probes

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Memory sources: which NVML call a GPU's memory readings came from
// (GPUStat.MemSource).
const (
	// MemFromV2 is nvmlDeviceGetMemoryInfo_v2: used is the memory allocated
	// on the GPU, as nvidia-smi's memory.used; reserved (driver and
	// firmware) is reported beside it.
	MemFromV2 = "nvml_memory_info_v2"
	// MemFromV1 is nvmlDeviceGetMemoryInfo, the fallback where the driver
	// has no v2 call: its used is the sum of reserved and allocated memory,
	// so it reads above nvidia-smi's memory.used by the reserved amount.
	MemFromV1 = "nvml_memory_info_v1"
	// MemFromMixed marks a GPU whose samples came from both (a probe stream
	// joined from two mbench versions).
	MemFromMixed = "mixed"
)

const memInfoV2Symbol = "nvmlDeviceGetMemoryInfo_v2"

// memoryReader reads one GPU's memory with the call chosen for it once, when
// the sampler discovers the GPU: nvmlDeviceGetMemoryInfo_v2 where the loaded
// NVML exports it and it answers for this GPU, else the v1 call. The choice
// is made once so that a run's samples, and the gate's baseline against
// them, all mean the same thing. The symbol is looked up before the first
// call: go-nvml links NVML's functions lazily, and calling one the driver's
// library lacks kills the process.
type memoryReader struct {
	v2 bool
}

func newMemoryReader(lib nvml.Interface, d nvml.Device) memoryReader {
	if lib.Extensions().LookupSymbol(memInfoV2Symbol) != nil {
		return memoryReader{}
	}
	_, ret := d.GetMemoryInfo_v2()
	return memoryReader{v2: ret == nvml.SUCCESS}
}

// read fills x's memory fields; it returns the call's result.
func (m memoryReader) read(d nvml.Device, x *GPUSample) nvml.Return {
	if m.v2 {
		v, ret := d.GetMemoryInfo_v2()
		if ret != nvml.SUCCESS {
			return ret
		}
		x.MemUsedMiB, x.MemReservedMiB, x.MemTotalMiB = mib(v.Used), new(mib(v.Reserved)), mib(v.Total)
		return nvml.SUCCESS
	}
	v, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return ret
	}
	x.MemUsedMiB, x.MemTotalMiB = mib(v.Used), mib(v.Total)
	return nvml.SUCCESS
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// memSource names where a GPU's memory samples came from: MemFromV2 when
// every sample that read memory carries the reserved amount, MemFromV1 when
// none does, MemFromMixed otherwise; "" when no sample read memory.
func memSource(ss []GPUSample) string {
	v1, v2 := 0, 0
	for i := range ss {
		switch {
		case ss[i].MemReservedMiB != nil:
			v2++
		case ss[i].MemTotalMiB > 0:
			v1++
		}
	}
	switch {
	case v2 > 0 && v1 > 0:
		return MemFromMixed
	case v2 > 0:
		return MemFromV2
	case v1 > 0:
		return MemFromV1
	}
	return ""
}
