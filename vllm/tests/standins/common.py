"""Shared pieces of the vLLM stand-ins (not version-specific).

* ``spin(ns)``: busy-wait, so injected phase lengths are exact lower bounds.
* ``Timings``: the injected phase lengths and the ground truth each stand-in
  records with its own clock, independently of the plugin.
* ``SchedulerOutput`` / ``ModelRunnerOutput`` / ``Request``: the fields the
  plugin and the stand-ins read, with vLLM's names.
* ``make_plugins_module``: a faithful copy of the *logic* of
  vllm/plugins/__init__.py (vllm-project/vllm@b36adfa349cfab0e79f3d736d5e5413bd3ee19f5, in 0.18.1, L14-L82):
  entry points of group ``vllm.general_plugins``, filtered by
  ``VLLM_PLUGINS`` (comma-separated; unset = all), loaded once per process.
* ``install_modules``: puts a fake ``vllm`` package into ``sys.modules``.
"""

from __future__ import annotations

import os
import sys
import time
import types
from dataclasses import dataclass, field

perf = time.perf_counter_ns


def spin(ns: int) -> None:
    """Busy-wait ns nanoseconds (exact lower bound, unlike sleep)."""
    if ns <= 0:
        return
    end = perf() + ns
    while perf() < end:
        pass


@dataclass
class Timings:
    """Injected phase lengths (ns) and the stand-ins' own measurements."""

    schedule: int = 0  # schedule() body, outside build_connector_meta
    build_meta: int = 0  # connector.build_connector_meta
    execute: int = 0  # model runner forward (inside the worker)
    get_finished: int = 0  # worker connector.get_finished
    update: int = 0  # update_from_output body
    gpu: int = 0  # GPU time of a batch's forward on the fake GPU (0: no GPU model)
    kernels: int = 1  # kernels per forward (gpu / kernels ns each)
    launch: int = 0  # CPU ns to launch one kernel (inside _model_forward)
    sample_gpu: int = 0  # the sampler's kernel, after the forward
    gpu_vary: bool = False  # batch k's forward takes gpu * (1 + (k % 4) / 4): a mis-join shows
    truth: dict = field(default_factory=dict)  # phase -> list of measured ns

    def note(self, phase: str, ns: int) -> None:
        self.truth.setdefault(phase, []).append(ns)


@dataclass
class Request:
    request_id: str
    num_tokens: int = 1


@dataclass
class SchedulerOutput:
    num_scheduled_tokens: dict
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict = field(default_factory=dict)
    finished_req_ids: set = field(default_factory=set)
    kv_connector_metadata: object = None
    pending_structured_output_tokens: bool = False
    has_structured_output_requests: bool = False
    standin_step: int = -1  # the stand-in scheduler's own count: labels the fake GPU's kernels


@dataclass
class KVConnectorOutput:
    finished_sending: object = None
    finished_recving: object = None
    invalid_block_ids: set = field(default_factory=set)


@dataclass
class ModelRunnerOutput:
    req_ids: list
    kv_connector_output: object = None


@dataclass
class KVTransferConfig:
    kv_connector: str
    kv_role: str = "kv_both"
    kv_connector_module_path: str | None = None
    engine_id: str = "standin"


@dataclass
class VllmConfig:
    """The config fields the stand-ins read."""

    timings: Timings
    kv_transfer_config: KVTransferConfig | None = None
    async_scheduling: bool = False  # → batch queue of 2 (max_concurrent_batches)
    prefill: dict = field(default_factory=dict)  # req id -> prompt tokens
    decode: int = 4  # running decode requests (1 token each)
    spec: dict = field(default_factory=dict)  # req id -> draft tokens
    # Every k-th scheduled batch waits for structured-output tokens of the
    # previous one: main's step_with_batch_queue defers its sampling.
    deferred_every: int = 0
    # --disable-hybrid-kv-cache-manager (main's factory refuses a connector
    # that is not SupportsHMA when this is False).
    disable_hybrid_kv_cache_manager: bool = True
    scheduler_cls: type | None = None  # scheduler_config.scheduler_cls
    tp: int = 1  # tensor-parallel ranks (main's MultiprocExecutor)

    @property
    def scheduler_config(self):
        from types import SimpleNamespace

        return SimpleNamespace(
            async_scheduling=self.async_scheduling,
            disable_hybrid_kv_cache_manager=self.disable_hybrid_kv_cache_manager,
        )

    @property
    def max_concurrent_batches(self) -> int:
        return 2 if self.async_scheduling else 1


def make_scheduler_output(cfg: VllmConfig, step: int) -> SchedulerOutput:
    nst = {f"d{i}": 1 for i in range(cfg.decode)}
    for rid, n in cfg.prefill.items():
        nst[rid] = n
    for rid, drafts in cfg.spec.items():
        nst[rid] = 1 + len(drafts)
    return SchedulerOutput(
        num_scheduled_tokens=nst,
        total_num_scheduled_tokens=sum(nst.values()),
        scheduled_spec_decode_tokens=dict(cfg.spec),
        finished_req_ids={f"f{step}"},
        standin_step=step,
    )


def make_plugins_module() -> types.ModuleType:
    """vllm.plugins with load_general_plugins (logic of vLLM's, see module doc)."""
    m = types.ModuleType("vllm.plugins")
    m.DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"
    m.plugins_loaded = False

    def load_plugins_by_group(group):
        from importlib.metadata import entry_points

        allowed = os.environ.get("VLLM_PLUGINS")
        allowed = None if allowed is None else allowed.split(",")
        out = {}
        for ep in entry_points(group=group):
            if allowed is None or ep.name in allowed:
                out[ep.name] = ep.load()
        return out

    def load_general_plugins():
        if m.plugins_loaded:
            return
        m.plugins_loaded = True
        for func in load_plugins_by_group(m.DEFAULT_PLUGINS_GROUP).values():
            func()

    m.load_plugins_by_group = load_plugins_by_group
    m.load_general_plugins = load_general_plugins
    return m


MODULES = (
    "vllm",
    "vllm.config",
    "vllm.plugins",
    "vllm.v1",
    "vllm.v1.engine",
    "vllm.v1.engine.core",
    "vllm.v1.core",
    "vllm.v1.core.sched",
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.worker",
    "vllm.v1.worker.kv_connector_model_runner_mixin",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.distributed",
    "vllm.distributed.kv_transfer",
    "vllm.distributed.kv_transfer.kv_connector",
    "vllm.distributed.kv_transfer.kv_connector.factory",
    "vllm.distributed.kv_transfer.kv_connector.v1",
    "vllm.distributed.kv_transfer.kv_connector.v1.base",
)


def build_modules(ns, version: str, omit: tuple[str, ...] = ()) -> dict:
    """Module objects of a fake vllm package exposing the stand-in classes."""
    mods = {name: types.ModuleType(name) for name in MODULES if name not in omit}
    for name, m in mods.items():
        m.__path__ = []  # a package, so submodule imports resolve
    if "vllm" in mods:
        mods["vllm"].__version__ = version
    if "vllm.plugins" in mods:
        mods["vllm.plugins"] = ns.plugins
    put = {
        "vllm.v1.engine.core": {"EngineCore": ns.EngineCore},
        "vllm.v1.core.sched.scheduler": {"Scheduler": ns.Scheduler},
        "vllm.v1.worker.kv_connector_model_runner_mixin": {
            "KVConnectorModelRunnerMixin": ns.KVConnectorModelRunnerMixin
        },
        "vllm.distributed.kv_transfer.kv_connector.factory": {
            "KVConnectorFactory": ns.KVConnectorFactory
        },
        "vllm.distributed.kv_transfer.kv_connector.v1.base": {
            "KVConnectorBase_V1": ns.KVConnectorBase_V1,
            "KVConnectorMetadata": ns.KVConnectorMetadata,
            "KVConnectorRole": ns.KVConnectorRole,
            **({"SupportsHMA": ns.SupportsHMA} if hasattr(ns, "SupportsHMA") else {}),
        },
    }
    if hasattr(ns, "SchedulerConfig"):
        put["vllm.config"] = {"SchedulerConfig": ns.SchedulerConfig}
    if hasattr(ns, "GPUModelRunner"):
        put["vllm.v1.worker.gpu_model_runner"] = {"GPUModelRunner": ns.GPUModelRunner}
    for mod, attrs in put.items():
        if mod in mods:
            for k, v in attrs.items():
                setattr(mods[mod], k, v)
    return mods


def install_modules(mods: dict) -> None:
    """Replace any vllm modules in sys.modules by mods (no monkeypatch)."""
    for name in list(sys.modules):
        if name == "vllm" or name.startswith("vllm."):
            del sys.modules[name]
    sys.modules.update(mods)
