package probes

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// OpenNVML loads libnvidia-ml and initializes it. On success it returns the
// library and a close function (nvml.Shutdown). On failure (no driver, no
// GPU, no library) it returns nil and an error saying why, and it calls no
// other NVML function: after a failed Init any NVML call may kill the
// process with a symbol lookup error that recover cannot catch. Callers must
// treat a nil library as "no GPU".
func OpenNVML() (nvml.Interface, func(), error) {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, func() {}, fmt.Errorf("nvml init: %s", returnName(ret))
	}
	return lib, func() { lib.Shutdown() }, nil
}

// returnName names an NVML return code without calling into NVML (whose
// ErrorString may be unreachable after a failed Init).
func returnName(r nvml.Return) string {
	switch r {
	case nvml.SUCCESS:
		return "SUCCESS"
	case nvml.ERROR_UNINITIALIZED:
		return "ERROR_UNINITIALIZED"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "ERROR_INVALID_ARGUMENT"
	case nvml.ERROR_NOT_SUPPORTED:
		return "ERROR_NOT_SUPPORTED"
	case nvml.ERROR_NO_PERMISSION:
		return "ERROR_NO_PERMISSION (no permission to access the GPU)"
	case nvml.ERROR_NOT_FOUND:
		return "ERROR_NOT_FOUND"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "ERROR_DRIVER_NOT_LOADED (NVIDIA driver not loaded: no GPU?)"
	case nvml.ERROR_TIMEOUT:
		return "ERROR_TIMEOUT"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "ERROR_LIBRARY_NOT_FOUND (libnvidia-ml.so.1 not found: no NVIDIA driver installed)"
	case nvml.ERROR_GPU_IS_LOST:
		return "ERROR_GPU_IS_LOST"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "ERROR_FUNCTION_NOT_FOUND"
	case nvml.ERROR_UNKNOWN:
		return "ERROR_UNKNOWN"
	}
	return fmt.Sprintf("NVML return code %d", int32(r))
}
