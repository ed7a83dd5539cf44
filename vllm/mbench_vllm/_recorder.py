"""Per-process step accumulators and the step log's writers.

Hot path (the engine-core thread): the wrappers in ``hooks`` add
``perf_counter_ns`` differences into one preallocated ``array('q')`` of the
step's record (``State.acc``); at the end of a step the record is copied
into a preallocated ring (``StepLog``) as the fixed binary record
``steplog`` describes. No formatting, no allocation and no per-request work
on the engine thread: a batch of one token per request (pure decode) is
counted from two lengths; a mixed batch's decode tokens are counted by the
flusher on the dicts vLLM built (kept until then).

The flusher thread (every 0.5 s, or when 64 records wait) converts each
record's end time to wall-clock µs, reads the completed CUDA events
(``gpu.GPU.resolve``) and writes their GPU time into the records of their
batches, then writes the ring's bytes with one ``os.write`` — a few
hundred ns of GIL per step instead of formatting a JSON line. Status lines
stay JSON text lines; the worker-side log (other processes) stays JSONL.

Field semantics (also in README.md and ``steplog``):

* A timer is present only when its hook is installed in this process *and*
  the hooked call ran during the step. Absent never means 0.
* ``unaccounted_us = step_duration_us - (top-level timers of the path)``
  (computed by the reader; an absent part counts as 0). ``build_meta_us``
  is nested in ``schedule_us`` and ``get_finished_us`` in ``execute_us`` /
  ``launch_us``; they are never subtracted a second time.
* ``batch`` names the batch a record's update (and wait, and gpu_us)
  belongs to; ``gpu_us`` is that batch's GPU time from CUDA events
  (``gpu``), joined by batch id when the flusher reads the events. A batch
  whose events complete after its record was written gets a GPU record of
  its own.
"""

from __future__ import annotations

import atexit
import json
import logging
import operator
import os
import threading
import time
from array import array
from collections import deque

from . import __version__, native
from .steplog import (F_BQ, M_EXEC, M_LAUNCH, M_SCHED, M_UPD, S_DEC, S_DUR, S_FLAGS, S_GF, S_PID, S_RUN,
                      S_TOTAL, S_TS, S_WAITING, STEP_BYTES, STEP_HEADER, STEP_SLOTS)

_perf_ns = time.perf_counter_ns
_wall_ns = time.time_ns

# The C hot path (native.py, _fastwrap.c) where it builds here, else None.
# State and StepLog derive from its types, so their hot fields are C fields
# that its timers reach directly and Python code reads as attributes.
NATIVE = native.load()
# The implementation hooks.py wraps methods with from now on: NATIVE, or
# None for the Python wrappers (always usable; tests switch between them).
FAST = NATIVE
_CoreBase = NATIVE.Core if NATIVE is not None else object
_RingBase = NATIVE.Ring if NATIVE is not None else object


def timers_status() -> dict:
    """Which timer implementation is active: the status line's ``timers``."""
    if FAST is not None:
        return {"timers": "c", "timers_detail": f"C wrappers: {native.detail}"}
    why = native.detail if NATIVE is None else "the Python wrappers were chosen (tests)"
    return {"timers": "python", "timers_detail": f"Python wrappers: {why}"}

FLUSH_INTERVAL_NS = 1_000_000_000  # records reach the file at least once a second
_TIMER_PERIOD_S = 0.5
# Queued step records that wake the flusher early.
WAKE_AT = 64
RING = 1 << 13  # step records the ring holds (8192 x 144 B); more unflushed are dropped, counted
_MASK = RING - 1
_YIELD_EVERY = 4096  # records converted between GIL yields


def _decode_tokens(total: int, nst, spec) -> int:
    """Decode tokens of a SchedulerOutput: requests scheduled for exactly one
    token, plus speculative-decode requests (1 + drafts each). Counted in
    the flusher thread, with one C-level pass (operator.countOf)."""
    try:
        dec = operator.countOf(nst.values(), 1)
        if spec:
            dec += sum(map(len, spec.values())) + len(spec)
    except Exception:
        return 0
    return min(dec, total)


def _fmt_worker(r: tuple) -> str:
    ts, gf, pid = r
    return f'{{"ts_us":{ts},"get_finished_us":{gf / 1e3},"pid":{pid}}}\n'


class StepLog(_RingBase):
    """The engine process's step log: step records in a ring of fixed
    binary records, written by the flusher.

    The engine thread fills slot ``n % RING`` and then advances ``n``; the
    flusher takes the records ``[done, n)``, patches them (wall-clock time,
    token counts, GPU time), writes them with ``os.write`` on an
    ``O_APPEND`` descriptor (so processes sharing a file interleave only at
    record boundaries) and advances ``done``. A record that finds the ring
    full is dropped and counted (the status line says so). ``head`` (a
    status line) is written at the start of every flush that writes.
    """

    def __init__(self, path: str, gpu=None):
        self.path = path
        self.gpu = gpu  # gpu.GPU: resolve() patches GPU time into the records
        self.buf = bytearray(RING * STEP_BYTES)
        self.q = memoryview(self.buf).cast("q")
        self.n = 0  # records put (engine thread)
        self.done = 0  # records written (flusher)
        self.dropped = 0
        self.mixed: deque = deque()  # (record index, SchedulerOutput dicts): decode tokens to count
        self.head: str | None = None
        self._lock = threading.Lock()
        self._fd: int | None = None
        self.last_flush_ns = _perf_ns()
        self.broken = False
        self._dropped_seen = 0
        # The C step timer wakes the flusher at wake_at queued records (once
        # until the next flush: woken) and calls State._poke once a flush
        # interval when no flush came.
        self.wake_at, self.interval_ns = WAKE_AT, FLUSH_INTERVAL_NS
        self.woken = False
        self.last_poke_ns = 0

    def put(self, acc: array) -> int:
        """Queue one record (the engine thread). Returns its index, or -1
        when the ring is full (the record is dropped)."""
        n = self.n
        if n - self.done >= RING:
            self.dropped += 1
            return -1
        j = (n & _MASK) * STEP_SLOTS
        self.q[j:j + STEP_SLOTS] = acc
        self.n = n + 1
        return n

    def flush(self, yield_gil: bool = False, force_head: bool = False) -> None:
        if self.broken:
            return
        gpu = self.gpu
        if self.n == self.done and not force_head and (gpu is None or gpu.idle()):
            return
        with self._lock:
            n, d = self.n, self.done
            parts: list = [self.head.encode()] if self.head else []
            q = self.q
            if n > d:
                mixed = self.mixed
                while mixed and mixed[0][0] < n:
                    k, nst, spec = mixed.popleft()
                    j = (k & _MASK) * STEP_SLOTS
                    q[j + S_DEC] = _decode_tokens(q[j + S_TOTAL], nst, spec)
                # Records hold perf_counter_ns; the wall clock's offset is
                # read here, off the engine thread.
                off = _wall_ns() - _perf_ns()
                for k in range(d, n):
                    j = (k & _MASK) * STEP_SLOTS + S_TS
                    q[j] = (q[j] + off) // 1000
                    if yield_gil and (k - d) % _YIELD_EVERY == _YIELD_EVERY - 1:
                        time.sleep(0)  # let the engine thread run
            extra = gpu.resolve(self, d, n) if gpu is not None else []
            if n > d:
                mv = memoryview(self.buf)
                i0, i1 = (d & _MASK) * STEP_BYTES, (n & _MASK) * STEP_BYTES
                if i1 > i0:
                    parts.append(mv[i0:i1])
                else:  # wrapped (or exactly full)
                    parts += [mv[i0:], mv[:i1]]
            parts.extend(extra)
            if n > d or extra or force_head:
                self._write(b"".join(parts))
            self.done = n
            self.last_flush_ns = _perf_ns()
            self.woken = False
        if self.dropped != self._dropped_seen:
            self._dropped_seen = self.dropped
            STATE.problem("step records", f"{self.dropped} step records dropped: the flusher fell "
                          f"{RING} records behind the engine")

    def _write(self, data: bytes) -> None:
        try:
            if self._fd is None:
                d = os.path.dirname(self.path)
                if d:
                    os.makedirs(d, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:  # never crash the engine over a log
            self.broken = True
            logging.getLogger("vllm.mbench_vllm").warning(
                "mbench_vllm: cannot write %s: %s; this log is disabled", self.path, exc
            )

    def abandon(self) -> None:
        """Forget queued records and the descriptor (in a forked child)."""
        self.n = self.done = 0
        self.mixed = deque()
        self._forget_fd()

    def _forget_fd(self) -> None:
        self._lock = threading.Lock()
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


class LineWriter:
    """Queues records, appends them as whole JSON lines to one file (the
    worker-side log of a process that runs no engine steps).

    ``put`` is a lock-free deque append. ``flush`` formats and writes with
    ``os.write`` on an ``O_APPEND`` descriptor.
    """

    def __init__(self, path: str, fmt):
        self.path = path
        self.fmt = fmt
        self._q: deque = deque()
        self._lock = threading.Lock()
        self._fd: int | None = None
        self.last_flush_ns = _perf_ns()
        self.broken = False

    def put(self, rec: tuple) -> None:
        self._q.append(rec)

    def flush(self, yield_gil: bool = False, force_head: bool = False) -> None:
        if self.broken or not self._q:
            return
        with self._lock:
            q, fmt, pop = self._q, self.fmt, self._q.popleft
            out: list[str] = []
            while q:
                out.extend([fmt(pop()) for _ in range(min(len(q), 256))])
                if yield_gil and q:
                    time.sleep(0)
            if out:
                self._write("".join(out).encode())
            self.last_flush_ns = _perf_ns()

    _write = StepLog._write
    _forget_fd = StepLog._forget_fd

    def abandon(self) -> None:
        self._q = deque()
        self._forget_fd()


def worker_log_path(step_log: str) -> str:
    """``<MBENCH_STEP_LOG without .jsonl>.worker.<pid>.jsonl`` for this pid."""
    base = step_log[:-6] if step_log.endswith(".jsonl") else step_log
    return f"{base}.worker.{os.getpid()}.jsonl"


def status_line(pid: int, vllm: str, path: str | None, gpu: dict, problems: dict) -> str:
    """The status line of one engine process (probes.EngineStatus)."""
    d = {"ts_us": _wall_ns() // 1000, "status": "engine", "pid": pid, "plugin": __version__,
         "vllm": vllm}
    if path:
        d["path"] = path
    d.update(gpu)
    d.update(timers_status())
    if problems:
        d["incomplete"] = [{"hook": k, "reason": v} for k, v in sorted(problems.items())]
    return json.dumps(d, separators=(",", ":")) + "\n"


class State(_CoreBase):
    """Hook state of this process. One instance: ``STATE``."""

    def __init__(self) -> None:
        self.step_log: str | None = None
        # Which timers are installed (decided by hooks.install and per engine).
        self.has_schedule = self.has_meta = self.has_update = False
        self.has_execute = self.has_get_finished = self.has_launch = False
        # Hook points that could not be applied (name -> why), per process.
        self.unhooked: dict[str, str] = {}
        # The status of this process's engine, rewritten into each flush.
        self.status: dict | None = None
        # True in the process that runs engine steps (set by the hooks).
        self.core_process = False
        self._writer: StepLog | None = None
        self._worker_writer: LineWriter | None = None
        self._timer: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.step_thread = 0  # threading.get_ident() of the thread in a step
        self._exit_hooks_pid = -1
        self.pid = os.getpid()
        self.gf_ns = self.gf_n = 0  # get_finished of another thread, for the next record
        self._gf_lock = threading.Lock()
        self.batch_seq = 0  # batch ids: one per scheduled batch, per process (from 1)
        # Re-entrancy guards: the outermost wrapper times, nested calls pass.
        self.in_step = self.in_sched = self.in_meta = self.in_update = self.in_gf = False
        self.in_launch = self.in_wait = False
        # The record of the step being timed (steplog's slots) and its
        # templates, [step() path, batch-queue path].
        self.acc = array("q", bytes(STEP_BYTES))
        self.tmpl = [self.acc, self.acc]
        self.t_step = self.t_sched_end = 0
        self.sched_out = None
        self.refresh_template()

    def refresh_template(self) -> None:
        """Rebuild the record templates (hooked timers, pid) after has_* or the pid changed."""
        mask = ((M_SCHED if self.has_schedule else 0) | (M_EXEC if self.has_execute else 0)
                | (M_UPD if self.has_update else 0) | (M_LAUNCH if self.has_launch else 0))
        t = array("q", bytes(STEP_BYTES))
        t[0] = STEP_HEADER
        t[S_RUN] = t[S_WAITING] = t[S_TOTAL] = t[S_DEC] = -1
        t[S_FLAGS] = mask << 8
        t[S_PID] = self.pid
        bq = array("q", t)
        bq[S_FLAGS] |= F_BQ
        self.tmpl = [t, bq]

    def problem(self, hook: str, reason: str) -> None:
        """Record a hook that cannot be applied; the status line says so."""
        if self.unhooked.get(hook) != reason:
            self.unhooked[hook] = reason
            if self.status is not None:
                self.set_status(**self.status)

    def set_status(self, **kw) -> None:
        """Set this engine's status; written now and with every flush."""
        self.status = kw
        w = self._writer or self.writer()
        w.head = status_line(self.pid, kw.get("vllm", "unknown"), kw.get("path"), kw.get("gpu", {}),
                             self.unhooked)

    def write_status_now(self) -> None:
        """Write the status line at once (engine start, before readiness)."""
        w = self._writer or self.writer()
        w.flush(force_head=True)

    # ---- writers and background flushing -------------------------------
    def _start_background(self) -> None:
        pid = os.getpid()
        if self._exit_hooks_pid != pid:
            # atexit covers a normal interpreter exit; multiprocessing children
            # (vLLM's workers) leave through os._exit after running
            # multiprocessing's finalizers, so register one there as well.
            atexit.register(self.flush_all)
            try:
                from multiprocessing import util

                util.Finalize(None, self.flush_all, exitpriority=10)
            except Exception:
                pass
            self._exit_hooks_pid = pid
        if not self.timer_alive():
            self._stop = threading.Event()
            self._wake = threading.Event()
            t = threading.Thread(target=self._run_timer, name="mbench-flush", daemon=True)
            t.start()
            self._timer = t

    def _run_timer(self) -> None:
        stop, wake = self._stop, self._wake
        while not stop.is_set():
            wake.wait(_TIMER_PERIOD_S)
            wake.clear()
            if stop.is_set():
                break
            self.flush_all(yield_gil=True)

    def timer_alive(self) -> bool:
        t = self._timer
        return t is not None and t.is_alive()

    def writer(self) -> StepLog:
        if self._writer is None:
            from .gpu import GPU

            self._writer = StepLog(os.path.abspath(self.step_log), GPU)
            self._start_background()
        return self._writer

    def worker_writer(self) -> LineWriter:
        if self._worker_writer is None:
            path = os.path.abspath(worker_log_path(self.step_log))
            self._worker_writer = LineWriter(path, _fmt_worker)
            self._start_background()
        return self._worker_writer

    def flush_all(self, yield_gil: bool = False) -> None:
        for w in (self._writer, self._worker_writer):
            if w is not None:
                w.flush(yield_gil)

    def before_fork(self) -> None:
        self.flush_all()  # the child must inherit nothing to write twice

    def after_fork_child(self) -> None:
        for w in (self._writer, self._worker_writer):
            if w is not None:
                w.abandon()
        self._writer = self._worker_writer = None
        self._timer = None
        self.core_process = False
        self.status = None
        self.pid = os.getpid()
        self.in_step = self.in_sched = self.in_meta = self.in_update = self.in_gf = False
        self.in_launch = self.in_wait = False
        self.gf_ns = self.gf_n = 0
        self._gf_lock = threading.Lock()
        self.refresh_template()

    def shutdown(self) -> None:
        """Flush and stop the timer thread (tests; at exit we only flush)."""
        self._stop.set()
        self._wake.set()
        self.flush_all()
        if self._timer is not None:
            self._timer.join(timeout=2)
        self._timer = None

    # ---- recording (hot path) ------------------------------------------
    def record_get_finished(self, dur_ns: int, t_end_ns: int) -> None:
        """get_finished timed outside the engine thread's step."""
        if self.core_process or self.in_step:
            # In-process worker (uniproc executor) on another thread: into
            # the next step record, under the lock emit also takes.
            with self._gf_lock:
                self.gf_ns += dur_ns
                self.gf_n += 1
            return
        if self.step_log is None:
            return
        w = self._worker_writer or self.worker_writer()
        w.put((_wall_ns() // 1000, dur_ns, self.pid))
        if t_end_ns - w.last_flush_ns >= FLUSH_INTERVAL_NS and not self.timer_alive():
            w.flush()

    def _poke(self, t1: int) -> None:
        """From the C step timer: wake the flusher (WAKE_AT records queued);
        flush from the step path when no flusher thread runs."""
        w = self._writer
        if w is None:
            return
        if w.n - w.done >= WAKE_AT and not self._wake.is_set():
            self._wake.set()
        if t1 - w.last_flush_ns >= FLUSH_INTERVAL_NS and not self.timer_alive():
            w.flush()

    def emit(self, engine, t0: int, t1: int) -> None:
        """Queue the record of the step that ran from t0 to t1 (perf ns)."""
        acc = self.acc
        acc[S_TS] = t1
        acc[S_DUR] = t1 - t0
        if self.gf_n:
            with self._gf_lock:
                acc[S_GF] += self.gf_ns
                self.gf_ns = self.gf_n = 0
        try:
            sched = engine.scheduler
            run, wait = len(sched.running), len(sched.waiting)
            acc[S_RUN], acc[S_WAITING] = run, wait
        except Exception:
            pass
        out = self.sched_out
        spec = nst = None
        if out is not None:
            # O(1) here: a batch of one token per request (pure decode, the
            # common case at high concurrency) is counted at once; otherwise
            # the flusher counts, on the dicts vLLM built for this step.
            try:
                total = out.total_num_scheduled_tokens
                nst = out.num_scheduled_tokens
                spec = out.scheduled_spec_decode_tokens
                if not spec and total == len(nst):
                    acc[S_DEC] = total
                    nst = None
                acc[S_TOTAL] = total
            except Exception:
                nst = None
        w = self._writer or self.writer()
        k = w.put(acc)
        if k >= 0 and nst is not None:
            w.mixed.append((k, nst, spec))
        if w.n - w.done >= WAKE_AT:
            if not self._wake.is_set():
                self._wake.set()
            if t1 - w.last_flush_ns >= FLUSH_INTERVAL_NS and not self.timer_alive():
                w.flush()  # no timer thread (e.g. it died): flush from the step path
        elif t1 - w.last_flush_ns >= FLUSH_INTERVAL_NS and not self.timer_alive():
            w.flush()


STATE = State()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=lambda: STATE.before_fork(),
        after_in_child=lambda: STATE.after_fork_child(),
    )
