"""Stand-ins for vLLM's EngineCore, Scheduler, KV connector base/factory and
model-runner connector mixin, one module per pinned version (each cites the
source it reproduces). ``fake_vllm`` installs one as the ``vllm`` package."""

from __future__ import annotations

from . import main, v0_10, v0_18
from .common import Timings, VllmConfig, KVTransferConfig, build_modules, install_modules

VERSIONS = {"0.10": v0_10, "0.18": v0_18, "main": main}


def fake_vllm(mod, omit: tuple[str, ...] = (), gpu: bool | str = False):
    """Fresh stand-in classes of ``mod`` installed as ``vllm``; returns them.
    With ``gpu=True`` a fake ``torch`` with CUDA events and a fresh fake
    device (fakegpu.py) is installed too; with ``False`` there is no torch
    at all (even where one is installed); ``"real"`` leaves the installed
    torch (gpu/steptimer's proof on a GPU, with runner.RUNNER_BASE set)."""
    from . import fakegpu

    fakegpu.uninstall()
    if gpu is True:
        fakegpu.install()
    elif gpu is False:
        fakegpu.block_torch()
    ns = mod.make()
    install_modules(build_modules(ns, mod.VERSION, omit))
    return ns


__all__ = ["VERSIONS", "fake_vllm", "Timings", "VllmConfig", "KVTransferConfig"]
