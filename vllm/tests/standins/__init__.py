"""Stand-ins for vLLM's EngineCore, Scheduler, KV connector base/factory and
model-runner connector mixin, one module per pinned version (each cites the
source it reproduces). ``fake_vllm`` installs one as the ``vllm`` package."""

from __future__ import annotations

from . import main, v0_10, v0_18
from .common import Timings, VllmConfig, KVTransferConfig, build_modules, install_modules

VERSIONS = {"0.10": v0_10, "0.18": v0_18, "main": main}


def fake_vllm(mod, omit: tuple[str, ...] = ()):
    """Fresh stand-in classes of ``mod`` installed as ``vllm``; returns them."""
    ns = mod.make()
    install_modules(build_modules(ns, mod.VERSION, omit))
    return ns


__all__ = ["VERSIONS", "fake_vllm", "Timings", "VllmConfig", "KVTransferConfig"]
