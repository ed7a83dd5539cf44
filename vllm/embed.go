package vllm

import "embed"

// Files is the mbench_vllm Python package as shipped to GPU hosts when a
// matrix sets engine.instrument: the package (with the C source of its
// optional fast timers, built on the host by mbench_vllm.check), its dist-info (so the
// vllm.general_plugins entry point is found from PYTHONPATH alone) and
// pyproject.toml (for pip install --no-deps).
//
//go:embed mbench_vllm/*.py mbench_vllm/*.c mbench_vllm/*.h mbench_vllm-0.1.0.dist-info/* pyproject.toml
var Files embed.FS
