"""Small helpers shared by the tests."""

from __future__ import annotations

import json
import os

from standins import KVTransferConfig, Timings, VllmConfig, fake_vllm

MS = 1_000_000  # ns
US = 1_000  # ns

TIMER_FIELDS = (
    "step_duration_us",
    "schedule_us",
    "build_meta_us",
    "execute_us",
    "update_us",
    "get_finished_us",
    "unaccounted_us",
)


def read_all(path: str) -> list[dict]:
    """Every record of a log as its JSONL dict: steps, status lines, GPU
    lines (binary step records decoded by mbench_vllm.steplog)."""
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    if data[:1] != b"\xff" and b"\xff" not in data:  # a JSONL file (worker lines)
        return [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    from mbench_vllm import steplog

    return steplog.decode(data)


def read_lines(path: str) -> list[dict]:
    """Step lines (and worker lines) of a log, without status and GPU lines."""
    return [d for d in read_all(path) if "status" not in d and "gpu_batch" not in d]


def read_status(path: str) -> list[dict]:
    """The status lines of a log."""
    return [d for d in read_all(path) if d.get("status") == "engine"]


def read_gpu_lines(path: str) -> list[dict]:
    """The GPU lines of a log (gpu_us of a batch written after its step)."""
    return [d for d in read_all(path) if "gpu_batch" in d]


def flush() -> None:
    from mbench_vllm._recorder import STATE

    STATE.flush_all()


def config(timings: Timings | None = None, connector: str | None = "SlowConnector",
           module_path: str | None = None, **kw) -> VllmConfig:
    kv = None
    if connector is not None:
        kv = KVTransferConfig(kv_connector=connector, kv_connector_module_path=module_path)
    return VllmConfig(timings=timings or Timings(), kv_transfer_config=kv, **kw)


def engine(ns, cfg: VllmConfig):
    """Construct the stand-in EngineCore the way EngineCoreProc does."""
    return ns.EngineCore(cfg, ns.Executor, log_stats=False)


def run_steps(eng, n: int) -> None:
    for _ in range(n):
        eng.step_fn()


def shutdown(eng) -> None:
    pool = getattr(eng.model_executor, "_pool", None)
    if pool is not None:
        pool.shutdown(wait=True)


__all__ = ["fake_vllm", "Timings", "MS", "US", "read_lines", "read_all", "read_status",
           "read_gpu_lines", "flush", "config", "engine", "run_steps", "shutdown", "TIMER_FIELDS"]
