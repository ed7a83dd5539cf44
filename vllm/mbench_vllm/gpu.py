"""GPU time per batch: CUDA events around the model forward, read without a
sync on the hot path.

Hook points (both in the process that runs the model):

* ``GPUModelRunner.execute_model(scheduler_output, ...)`` -> the batch id
  the engine tagged on the ``SchedulerOutput`` (``hooks.BATCH_ATTR``) becomes
  the current batch;
* ``GPUModelRunner._model_forward(...)`` -> a CUDA event recorded on the
  current stream before the call and one after it; the pair is queued with
  the current batch id. ``_model_forward`` is the V1 runner's one call of
  ``self.model(...)`` for a real batch (gpu_model_runner.py@7afe0faa L3283,
  called at L3812; @6adad087 L3946, L4554); dummy runs and CUDA-graph
  capture call the model elsewhere and are not timed.

Reading: the flusher thread (``_recorder.LineWriter.flush``) calls
``GPU.resolve``: for each queued pair, oldest first, ``end.query()`` (no
sync); a completed pair gives ``start.elapsed_time(end)`` — the GPU time of
the forward, including any idle gap inside it if the CPU launched kernels
slower than the GPU ran them — summed per batch and joined to the step line
of that batch (the step that collected it). The engine thread pays two
``Event.record`` calls and one deque append per forward.

Where the model runs in another process (multiproc executor: TP or PP > 1),
or the runner has no ``_model_forward`` (the V2 model runner), or torch/CUDA
is missing, GPU time is *not measured*, and the engine's status line says
why. Nothing here imports torch at module import time.
"""

from __future__ import annotations

from collections import deque

from .hooks import MARK, _mark
MAX_PENDING = 4096  # event pairs kept unread before the oldest are dropped


class GPUTimer:
    """CUDA-event GPU timing of this process's model forward. One: ``GPU``."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.torch = None
        self.measured = False
        self.reason = "no model runner was hooked in this process"
        self.hook = ""
        # Cleared in place: the wrappers hold these deques.
        if hasattr(self, "pending"):
            self.pending.clear()
            self.free.clear()
        else:
            self.pending: deque = deque()  # (batch, start, end) in launch order
            self.free: deque = deque()  # events to reuse
        self.cur_batch = None
        self.dropped = 0
        self.unclaimed: dict = {}  # batch -> [gpu ns, flushes seen]

    # ---- status ----------------------------------------------------------
    def status(self) -> dict:
        """The GPU part of the engine's status line (probes.EngineStatus)."""
        if self.measured:
            return {"gpu_time": "measured", "gpu_hook": self.hook}
        return {"gpu_time": "not_measured", "gpu_reason": self.reason}

    def not_measured(self, reason: str) -> None:
        self.measured = False
        self.reason = reason

    def fail(self, reason: str) -> None:
        """Stop measuring mid-run; the status line says so from now on."""
        from ._recorder import STATE

        self.not_measured(reason)
        STATE.problem("gpu_us", reason)
        if STATE.status is not None:
            STATE.set_status(**dict(STATE.status, gpu=self.status()))

    # ---- installation ----------------------------------------------------
    def load_torch(self):
        """torch with CUDA, or None (and the reason recorded)."""
        try:
            import torch  # noqa: PLC0415 - only where a model runs
        except Exception as exc:
            self.not_measured(f"torch is not importable in the engine process ({type(exc).__name__}: {exc})")
            return None
        try:
            ok = bool(torch.cuda.is_available())
        except Exception as exc:
            ok = False
            self.not_measured(f"torch.cuda.is_available() failed ({exc!r})")
            return None
        if not ok:
            self.not_measured("CUDA is not available in the engine process (torch.cuda.is_available() is False)")
            return None
        self.torch = torch
        return torch

    def install_runner(self, runner) -> None:
        """Hook the class of ``runner`` (the engine's in-process model runner)."""
        cls = type(runner)
        fwd = getattr(cls, "_model_forward", None)
        exe = getattr(cls, "execute_model", None)
        if fwd is None or exe is None:
            self.not_measured(
                f"{cls.__name__} has no _model_forward to bracket with CUDA events "
                "(the V2 model runner calls the model inside execute_model)")
            return
        if self.load_torch() is None:
            return
        _patch(cls, "execute_model", _wrap_execute)
        _patch(cls, "_model_forward", _wrap_forward)
        self.measured = True
        self.hook = f"CUDA events around {cls.__name__}._model_forward (in the engine process)"

    def new_event(self):
        return self.torch.cuda.Event(enable_timing=True)

    # ---- reading (flusher thread) ----------------------------------------
    def resolve(self, records) -> tuple[dict, list[str]]:
        """Read the completed event pairs: GPU ns by batch for the batches of
        ``records`` (queued step records), and GPU lines for batches whose
        step line was written before their events completed."""
        done = self._read()
        if not done and not self.unclaimed:
            return {}, []
        from ._recorder import R_BATCH, fmt_gpu_line, _wall_ns, STATE

        for b, ns in done.items():
            u = self.unclaimed.get(b)
            if u is None:
                self.unclaimed[b] = [ns, 0]
            else:
                u[0] += ns
        wanted = {r[R_BATCH] for r in records}
        out: dict = {}
        lines: list[str] = []
        for b in list(self.unclaimed):
            ns, seen = self.unclaimed[b]
            if b in wanted and b is not None:
                out[b] = ns
                del self.unclaimed[b]
            elif seen >= 2:  # no step line claimed it for two flushes
                lines.append(fmt_gpu_line(_wall_ns() // 1000, b, ns, STATE.pid))
                del self.unclaimed[b]
            else:
                self.unclaimed[b][1] = seen + 1
        return out, lines

    def _read(self) -> dict:
        done: dict = {}
        pending, free = self.pending, self.free
        while pending:
            b, e0, e1 = pending[0]
            try:
                if not e1.query():
                    break  # one stream: later pairs are not done either
                ns = int(e0.elapsed_time(e1) * 1e6)
            except Exception:
                ns = None
            pending.popleft()
            if ns is not None:
                done[b] = done.get(b, 0) + ns
            free.append(e0)
            free.append(e1)
        return done


GPU = GPUTimer()


def _patch(cls, name: str, wrapper) -> None:
    f = cls.__dict__.get(name) or getattr(cls, name)
    if getattr(f, MARK, False):
        return
    setattr(cls, name, wrapper(f))


def _wrap_execute(orig):
    from .hooks import BATCH_ATTR

    g = GPU

    def execute_model(self, scheduler_output, *args, **kwargs):
        g.cur_batch = getattr(scheduler_output, BATCH_ATTR, None)
        return orig(self, scheduler_output, *args, **kwargs)

    return _mark(execute_model, orig)


def _wrap_forward(orig):
    g = GPU
    free, pending = g.free, g.pending

    def _model_forward(self, *args, **kwargs):
        if not g.measured:
            return orig(self, *args, **kwargs)
        try:
            e0 = free.pop() if free else g.new_event()
            e1 = free.pop() if free else g.new_event()
            e0.record()
        except Exception as exc:  # never break the forward over a timer
            g.fail(f"recording a CUDA event failed: {exc!r}")
            return orig(self, *args, **kwargs)
        try:
            return orig(self, *args, **kwargs)
        finally:
            try:
                e1.record()
                pending.append((g.cur_batch, e0, e1))
                if len(pending) > MAX_PENDING:  # no flusher reads them: keep memory bounded
                    pending.popleft()
                    g.dropped += 1
            except Exception as exc:
                g.fail(f"recording a CUDA event failed: {exc!r}")

    return _mark(_model_forward, orig)


def find_runner(engine):
    """The engine's in-process model runner, or (None, why not)."""
    ex = getattr(engine, "model_executor", None)
    if ex is None:
        return None, "the engine has no model_executor"
    wrapper = getattr(ex, "driver_worker", None)
    if wrapper is None:
        return None, (f"{type(ex).__name__} has no in-process driver worker (the multiproc executor runs "
                      "the model in worker processes, TP/PP > 1): GPU time is measured only with the "
                      "in-process executor (one GPU)")
    worker = getattr(wrapper, "worker", wrapper)
    runner = getattr(worker, "model_runner", None)
    if runner is None:
        return None, f"{type(worker).__name__} has no model_runner"
    return runner, ""
