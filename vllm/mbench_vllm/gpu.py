"""GPU time per batch: CUDA events around the model forward, read without a
sync on the hot path.

Hook point (in the process that runs the model):
``GPUModelRunner._model_forward(...)`` -> a CUDA event recorded on the
current stream right before the call and one right after it; the pair is
queued with the batch id of the batch being launched (the in-process
executor runs ``execute_model`` inline, right after ``schedule()`` tagged
the batch: ``STATE.batch_seq``). ``_model_forward`` is the V1 runner's one
call of ``self.model(...)`` for a real batch (gpu_model_runner.py@7afe0faa
L3283, called at L3812; @6adad087 L3946, L4554); dummy runs and CUDA-graph
capture call the model elsewhere and are not timed.

What ``gpu_us`` is: the GPU's span of the forward, from the moment the GPU
reached the start event to the moment it reached the end event. When the
GPU is busy with earlier work as the forward is launched (a GPU-bound
engine), the start event completes when that work does and the span is the
forward's kernels. When the GPU is idle (a CPU-bound engine), the start
event completes at once, so the span also holds the host's time from the
event record to the forward's first kernel (vLLM's own Python before it,
the kernel launch latency) and any gap inside the forward where the host
launched kernels slower than the GPU ran them. So the wrapper also asks,
once the forward has been launched, whether the GPU has already reached
the start event (``start.query()``, no sync) and reads the host's launch
time (two clock reads): if it had, and the launch took more than
``HOST_SHARE`` of the span, the span holds host time and is written as
*host-bound* (``gpu_host_bound``: an upper bound that readers leave out of
gpu_us); if the GPU was still behind, every kernel was queued before it
reached the start event and the span is the kernels'; if the launch was
that short (a CUDA graph), the span is within ``HOST_SHARE`` of them. The
plugin adds nothing
between its event record and the call: the events are created and
recorded once at install (a pool), ``torch.Event.record()`` (C, the
current stream) is used where torch has it, and the wrapper does its
bookkeeping after the end event.

Reading: the flusher thread (``_recorder.StepLog.flush``) calls
``GPU.resolve``: for each queued pair, oldest first, ``end.query()`` (no
sync); a completed pair gives ``start.elapsed_time(end)``, summed per batch
and written into the record of the step that collected that batch (with
the host-bound flag when any of its forwards was). The engine thread pays
two event records, one event query, two clock reads and one deque append
per forward.

Which events: where the C timers load, their own (``_fastwrap_events.h``):
a pool made with the CUDA driver API (libcuda, found with dlopen; the
library torch's runtime calls), recorded by a C ``Timer`` (kind
``K_FWD``) on torch's current stream with one ``cuEventRecord`` each, read
by the flusher with torch's context pushed; no Python on the timed path.
Else, or with ``MBENCH_GPU_EVENTS=torch``, or where the driver's events do
not work (the status line's ``gpu_hook`` says why), ``torch.Event`` as
above. Both paths do the same steps in the same order.

Sampling: timing a forward costs the engine thread two event records, a
query and the wrapper (13-26 us on the H200 host, more than the step
timers' whole budget), so by default a random 1 in ``DEFAULT_EVERY``
forwards is timed and the others run untouched behind a gate (the C
``Timer`` kind ``K_GATE`` where the C timers load: one multiply per
forward; else a Python wrapper). Each timed batch's gpu_us is its measured
GPU time; the unsampled batches have none (never an estimate), and the
status line's ``gpu_hook`` and ``gpu_sample_every`` say how many were
sampled. ``MBENCH_GPU_TIME`` in the engine's environment sets it
(``gpu_time_setting``): ``1/N`` a random 1 in N, ``all`` (or ``1``,
``on``) every forward, ``0`` (or ``off``) none.

Where the model runs in another process (multiproc executor: TP or PP > 1),
or the runner has no ``_model_forward`` (the V2 model runner), or torch/CUDA
is missing, GPU time is *not measured*, and the engine's status line says
why. Nothing here imports torch at module import time.
"""

from __future__ import annotations

import os
import random
from collections import deque
from time import perf_counter_ns

from .hooks import MARK, _mark
from .steplog import F_GPU_HOST, S_BATCH, S_FLAGS, S_GPU, STEP_SLOTS, pack_gpu

MAX_PENDING = 4096  # event pairs kept unread before the oldest are dropped
POOL = 256  # events created and recorded at install: 128 forwards in flight
# A span whose start the GPU reached before the host finished launching is
# host-bound when the launch took more than this share of it. The GPU can
# only have idled inside the span while the host launched, so an unmarked
# span's kernels take at least (1 - HOST_SHARE) of it.
HOST_SHARE = 0.05
DEFAULT_EVERY = 16  # a random 1 in 16 forwards timed unless MBENCH_GPU_TIME says otherwise
ENV_GPU_TIME = "MBENCH_GPU_TIME"
# Which events: "driver" (the C timers' own, on the CUDA driver API:
# _fastwrap_events.h), "torch" (torch.Event), or unset: the driver's where
# the C timers load and they work, else torch's.
ENV_GPU_EVENTS = "MBENCH_GPU_EVENTS"
ENV_LIBCUDA = "MBENCH_LIBCUDA"  # the CUDA driver library (default libcuda.so.1; the tests' fake)


def gpu_time_setting(value: str | None) -> tuple[int, str]:
    """(every, error) for the value of MBENCH_GPU_TIME: every = 0 (off),
    1 (each forward) or N (a random 1 in N); error says why a value is not
    understood (every is then 0: GPU time is not measured, and the status
    line carries the error)."""
    v = (value or "").strip().lower()
    if v == "":
        return DEFAULT_EVERY, ""
    if v in ("0", "off", "no", "false", "none"):
        return 0, ""
    if v in ("1", "on", "yes", "true", "all", "every", "1/1"):
        return 1, ""
    num, sep, den = v.partition("/")
    if sep and num.strip() == "1" and den.strip().isdigit() and 1 <= int(den) <= 1_000_000:
        return int(den), ""
    return 0, (f"{ENV_GPU_TIME}={value!r} is not understood: use 1/N (a random 1 in N forwards, "
               f"N from 1 to 1000000; the default 1/{DEFAULT_EVERY}), all, or 0 (off)")


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
            self.pending: deque = deque()  # (batch, start, end, host launch ns or 0) in launch order
            self.free: deque = deque()  # events to reuse
        self.dropped = 0
        self.created = 0  # events made after install (the pool ran dry)
        self.make = None  # the event factory chosen at install
        self.api = ""
        self.every = DEFAULT_EVERY  # a random 1 in every forwards is timed (install sets it)
        self.rng = random.Random()  # the Python gate's draws (the C gate has its own)
        self.gate = ""  # which gate: "" (none: every forward), "c", "python"
        if getattr(self, "events", None) is not None:
            self.events.on = 0
            self.events.clear()
        self.events = None  # the C Events where the driver's events are used
        self.unclaimed: dict = {}  # batch -> [gpu ns, flushes seen, host-bound]

    def idle(self) -> bool:
        """No event pair or GPU time waits to be read or written."""
        return not self.pending and not self.unclaimed and (self.events is None or self.events.pending == 0)

    # ---- status ----------------------------------------------------------
    def status(self) -> dict:
        """The GPU part of the engine's status line (probes.EngineStatus)."""
        if self.measured:
            return {"gpu_time": "measured", "gpu_hook": self.hook, "gpu_sample_every": self.every}
        return {"gpu_time": "not_measured", "gpu_reason": self.reason}

    def not_measured(self, reason: str) -> None:
        self.measured = False
        self.reason = reason
        if self.events is not None:
            self.events.on = 0

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
        """Hook the class of ``runner`` (the engine's in-process model runner),
        timing the share of forwards MBENCH_GPU_TIME asks for, unless the
        engine's environment turned GPU timing off (``MBENCH_GPU_TIME=0``:
        the step timers alone, at their lower engine-thread cost)."""
        raw = os.environ.get(ENV_GPU_TIME)
        every, err = gpu_time_setting(raw)
        if err:
            self.not_measured(err)
            return
        if every == 0:
            self.not_measured(f"GPU timing turned off in the engine's environment ({ENV_GPU_TIME}={raw})")
            return
        self.every = every
        cls = type(runner)
        if getattr(cls, "_model_forward", None) is None:
            self.not_measured(
                f"{cls.__name__} has no _model_forward to bracket with CUDA events "
                "(the V2 model runner calls the model inside execute_model; vLLM 0.26 runs every "
                "dense model on it by default: VLLM_USE_V2_MODEL_RUNNER=0 in the engine's "
                "environment selects the V1 runner, whose forwards are timed)")
            return
        torch = self.load_torch()
        if torch is None:
            return
        why_not_driver = self.install_driver_events(torch)
        if self.events is not None:
            self.api = "CUDA driver events (cuEventRecord on torch's current stream, from C)"
            self._hook(cls)
            return
        make, api = choose_events(torch)
        if why_not_driver:
            api += f"; the CUDA driver's events were not used: {why_not_driver}"
        if make is None:
            self.not_measured(f"CUDA events do not work in the engine process: {api}")
            return
        try:
            pool = [make() for _ in range(POOL)]
            for e in pool:  # CUDA creates an event at its first record: not on the hot path
                e.record()
            pool[-1].synchronize()
        except Exception as exc:
            self.not_measured(f"creating {POOL} CUDA events failed: {exc!r}")
            return
        self.make, self.api = make, api
        self.free.extend(pool)
        self._hook(cls)

    def install_driver_events(self, torch) -> str:
        """Make the C Events (self.events) unless MBENCH_GPU_EVENTS=torch or
        the C timers did not load; "" when made, else why not."""
        from . import _recorder

        want = os.environ.get(ENV_GPU_EVENTS, "").strip().lower()
        if want == "torch":
            return f"{ENV_GPU_EVENTS}=torch"
        fw = _recorder.FAST
        if fw is None or not hasattr(fw, "Events"):
            return "the C timers are not loaded"
        try:
            stream = torch._C._cuda_getCurrentRawStream
            dev = int(torch.cuda.current_device())
            self.events = fw.Events(os.environ.get(ENV_LIBCUDA) or "libcuda.so.1", POOL, MAX_PENDING, stream, dev,
                                    self.fail)
        except Exception as exc:
            self.events = None
            return f"{type(exc).__name__}: {exc}"
        return ""

    def timed(self, orig):
        """The timed wrapper of orig on this install's events."""
        from . import _recorder

        if self.events is not None:
            fw = _recorder.FAST
            return _mark(fw.Timer(orig, _recorder.STATE, fw.K_FWD, seen=self.events), orig)
        return _timed_forward(orig)

    def _hook(self, cls) -> None:
        """Wrap cls._model_forward for this install (a wrapper an earlier
        install left on the class, with its events and gate, is replaced)."""
        self.generation = getattr(GPUTimer, "_installs", 0) + 1
        GPUTimer._installs = self.generation
        f = getattr(cls, "_model_forward")
        if getattr(f, MARK, False) and getattr(f, "_mbench_gpu_gen", None) is not None:
            setattr(cls, "_model_forward", f.__wrapped__)
        _patch(cls, "_model_forward", _wrap_forward)
        self.gate = getattr(getattr(cls, "_model_forward", None), "_mbench_gpu_gate", "")
        self.measured = True
        self.hook = f"CUDA events ({self.api}) around {cls.__name__}._model_forward (in the engine process)"
        if self.every > 1:
            self.hook += (f", on a random 1 in {self.every} forwards ({self.gate} gate; "
                          f"{ENV_GPU_TIME}=all times every one)")

    def grow(self):
        """Two more events (the pool ran dry: more than POOL/2 forwards unread)."""
        self.created += 2
        return self.make(), self.make()

    # ---- reading (flusher thread) ----------------------------------------
    def resolve(self, log, lo: int, hi: int) -> list:
        """Read the completed event pairs; write each batch's GPU time into
        its step record among ``log``'s unwritten records ``[lo, hi)``;
        return GPU records (bytes) for batches whose step record was written
        before their events completed."""
        done = self._read()
        if not done and not self.unclaimed:
            return []
        from ._recorder import STATE, _MASK, _wall_ns

        un = self.unclaimed
        for b, (ns, hb) in done.items():
            u = un.get(b)
            if u is None:
                un[b] = [ns, 0, hb]
            else:
                u[0] += ns
                u[2] = u[2] or hb
        if hi > lo and un:
            q = log.q
            for k in range(lo, hi):
                j = (k & _MASK) * STEP_SLOTS
                u = un.pop(q[j + S_BATCH], None)
                if u is not None:
                    q[j + S_GPU] = u[0]
                    if u[2]:
                        q[j + S_FLAGS] |= F_GPU_HOST
                    if not un:
                        break
        late: list = []
        for b in list(un):
            ns, seen, hb = un[b]
            if seen >= 2:  # no step record claimed it for two flushes
                late.append(pack_gpu(_wall_ns() // 1000, b, ns, STATE.pid, hb))
                del un[b]
            else:
                un[b][1] = seen + 1
        return late

    def _read(self) -> dict:
        """batch -> [span ns, host-bound] of the completed pairs."""
        done: dict = {}
        for b, ns, host in self.events.read() if self.events is not None else self._read_torch():
            if ns is None or not b:
                continue
            hb = host > HOST_SHARE * ns
            d = done.get(b)
            if d is None:
                done[b] = [ns, hb]
            else:
                d[0] += ns
                d[1] = d[1] or hb
        return done

    def _read_torch(self) -> list:
        """[(batch, span ns or None, host ns)] of the completed torch pairs,
        oldest first, their events back in the pool."""
        out: list = []
        pending, free = self.pending, self.free
        while pending:
            b, e0, e1, host = pending[0]
            try:
                if not e1.query():
                    break  # one stream: later pairs are not done either
                ns = max(int(e0.elapsed_time(e1) * 1e6), 1)
            except Exception:
                ns = None
            pending.popleft()
            out.append((b, ns, host))
            free.append(e0)
            free.append(e1)
        return out


def choose_events(torch):
    """(event factory, its name) for timing events on the current stream,
    the cheapest that works here: ``torch.Event`` (record() in C, on the
    current stream of the current device) where torch has it, else
    ``torch.cuda.Event`` (record() builds a Stream object in Python). Each
    is tried once (record, synchronize, query, elapsed_time); (None, why)
    when none works."""
    tried = []
    ev = getattr(torch, "Event", None)
    if ev is not None:
        tried.append(("torch.Event", lambda: ev(device="cuda", enable_timing=True)))
    tried.append(("torch.cuda.Event", lambda: torch.cuda.Event(enable_timing=True)))
    errors = []
    for name, make in tried:
        try:
            a, b = make(), make()
            a.record()
            b.record()
            b.synchronize()
            if not (a.query() and b.query()):
                raise RuntimeError("query() is False after synchronize()")
            if not a.elapsed_time(b) >= 0:
                raise RuntimeError("elapsed_time() < 0")
            return make, name
        except Exception as exc:
            errors.append(f"{name}: {exc!r}")
    return None, "; ".join(errors)


GPU = GPUTimer()


def _patch(cls, name: str, wrapper) -> None:
    f = cls.__dict__.get(name) or getattr(cls, name)
    if getattr(f, MARK, False):
        return
    setattr(cls, name, wrapper(f))


def _wrap_forward(orig):
    """_model_forward behind the sampling gate: a random 1 in GPU.every
    calls go to the timed wrapper, the others to the method itself. The
    wrapper says which gate it is in ``_mbench_gpu_gate`` ("" when every
    call is timed, "c", "python")."""
    from . import _recorder

    g = GPU
    timed = g.timed(orig)
    fw = _recorder.FAST
    if g.every <= 1:
        f, gate = timed, ""
    elif fw is not None:
        seed = int.from_bytes(os.urandom(8), "little") | 1
        f = _mark(fw.Timer(orig, _recorder.STATE, fw.K_GATE, hook=timed, every=g.every, seed=seed), orig)
        gate = "c"
    else:
        draw = g.rng.random
        p = 1.0 / g.every

        def _model_forward(self, *args, **kwargs):
            if draw() >= p:
                return orig(self, *args, **kwargs)
            return timed(self, *args, **kwargs)

        f, gate = _mark(_model_forward, orig), "python"
    f._mbench_gpu_gen = g.generation
    f._mbench_gpu_gate = gate  # GPU._hook reads it off the class
    return f


def _timed_forward(orig):
    """_model_forward between two CUDA events: nothing of the plugin's
    between the start event's record and the call."""
    from ._recorder import STATE

    g = GPU
    st = STATE
    free, pending = g.free, g.pending
    pop, push = free.pop, pending.append
    clock = perf_counter_ns

    def _model_forward(self, *args, **kwargs):
        if not g.measured:
            return orig(self, *args, **kwargs)
        try:
            e1 = pop()
            e0 = pop()
        except IndexError:
            e0, e1 = g.grow()
        t0 = clock()  # before the record: the span cannot start earlier
        try:
            e0.record()
        except Exception as exc:  # never break the forward over a timer
            g.fail(f"recording a CUDA event failed: {exc!r}")
            return orig(self, *args, **kwargs)
        try:
            return orig(self, *args, **kwargs)
        finally:
            try:
                # The host's launch time, where the GPU had already reached
                # the start event (it then waited on the host); 0 where it
                # was still behind (every kernel queued before it got there).
                host = clock() - t0
                if not e0.query():
                    host = 0
                e1.record()
                push((st.batch_seq, e0, e1, host))
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
