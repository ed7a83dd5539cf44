"""vLLM general plugin ``mbench_steps``: per-step timing to MBENCH_STEP_LOG.

vLLM calls :func:`register` through the ``vllm.general_plugins`` entry point
in every process it starts (API server, engine core, workers), and again at
the top of ``EngineCore.__init__`` — before the engine binds ``step_fn`` —
so the class methods are patched before any engine core exists.

``register()`` does nothing unless ``MBENCH_STEP_LOG`` is set. It is
idempotent: a second call neither re-wraps nor re-warns.
"""

from __future__ import annotations

import logging
import os

from . import hooks
from ._recorder import STATE

ENV_LOG = "MBENCH_STEP_LOG"

logger = logging.getLogger("vllm.mbench_vllm")

_status: dict[str, str] | None = None


def register() -> None:
    """Entry point of the plugin (``mbench_vllm.plugin:register``)."""
    path = os.environ.get(ENV_LOG)
    if not path:
        return
    install(path)


def install(path: str, targets: hooks.Targets | None = None) -> dict[str, str]:
    """Install the hooks once per process and log to ``path``.

    ``targets`` defaults to what :func:`hooks.discover` finds in the
    installed vLLM. Never raises: a failure is reported and leaves vLLM as it
    was at the failing hook.
    """
    global _status
    STATE.step_log = path
    if _status is not None:
        return _status
    try:
        t = targets if targets is not None else hooks.discover()
        status = hooks.install(t)
    except Exception as exc:  # never break vLLM start-up
        logger.warning("mbench_vllm: hook installation failed: %r; no step log", exc)
        _status = {"install": f"failed: {exc!r}"}
        return _status
    _status = status
    missing = {k: v for k, v in status.items() if not v.startswith("OK")}
    for k, v in missing.items():  # into every status line of this process
        STATE.problem(k, v)
    if missing:
        logger.warning(
            "mbench_vllm: vLLM %s lacks hook points %s; their fields are absent "
            "from every line of %s (pid %d)",
            t.version,
            "; ".join(f"{k} ({v})" for k, v in missing.items()),
            path,
            os.getpid(),
        )
    else:
        logger.info("mbench_vllm: vLLM %s: all step hooks installed; log %s", t.version, path)
    return status


def status() -> dict[str, str] | None:
    """Hook status of this process (None before the first install)."""
    return _status


def _reset_for_tests() -> None:
    """Forget the install decision and recorder state (tests only)."""
    global _status
    from .gpu import GPU

    STATE.shutdown()
    _status = None
    STATE.__init__()
    GPU.reset()
