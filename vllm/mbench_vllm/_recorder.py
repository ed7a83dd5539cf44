"""Per-process step accumulators and the buffered JSONL writers.

Hot path (the engine-core thread): the wrappers in ``hooks`` add
``perf_counter_ns`` differences to attributes of ``STATE``; at the end of a
step ``STATE.emit`` queues one small tuple. Formatting, the GPU-event reads
(``gpu.GPU.resolve``) and ``os.write`` happen in a background thread (every
0.5 s, in chunks that yield the GIL), at exit, and before a fork — so a step
pays a few attribute updates and one deque append, not JSON formatting and
no per-request work.

Field semantics (also in README.md):

* A timer field is written only when its hook is installed in this process
  *and* the hooked call ran during the step. Absent never means 0.
* ``unaccounted_us = step_duration_us - (top-level timers of the path)``
  (an absent part counts as 0 here: its time is, by definition, unaccounted).
  ``build_meta_us`` is nested in ``schedule_us`` and ``get_finished_us`` in
  ``execute_us`` / ``launch_us``; they are never subtracted a second time.
* ``batch`` names the batch a line's update (and wait, and gpu_us) belongs
  to; ``gpu_us`` is that batch's GPU time from CUDA events (``gpu``), joined
  by batch id when the flusher reads the events. A batch whose events
  complete after its line was written gets a GPU line of its own.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from collections import deque

from . import __version__

_perf_ns = time.perf_counter_ns
_wall_ns = time.time_ns

FLUSH_INTERVAL_NS = 1_000_000_000  # lines reach the file at least once a second
_TIMER_PERIOD_S = 0.5
_CHUNK = 256  # records formatted between GIL yields
# Queued step records that wake the flusher early: bounds what a fast loop
# keeps alive between flushes (each record holds its step's token dicts).
WAKE_AT = 64

# Positions in a step record (the tuple State.emit queues).
(R_TS, R_DUR, R_SCHED, R_META, R_EXEC, R_UPD, R_GF, R_RUN, R_WAIT, R_TOTAL, R_NST, R_PID,
 R_BQ, R_LAUNCH, R_BWAIT, R_BATCH) = range(16)


def _fmt_step(r: tuple, gpu_ns: int | None, wall_off: int) -> str:
    t1, dur, sch, meta, exe, upd, gf, run, wait, total, nst, pid, bq, launch, bwait, batch = STATE.hooked(r)
    acc = 0
    s = f'{{"ts_us":{(t1 + wall_off) // 1000},"step_duration_us":{dur / 1e3}'
    if sch is not None:
        s += f',"schedule_us":{sch / 1e3}'
        acc = sch
    if meta is not None:
        s += f',"build_meta_us":{meta / 1e3}'
    if bq:
        # Batch-queue path: no execute_us (end of schedule() to start of
        # update_from_output() spans two batches there); the engine thread's
        # time between is split into launching and waiting.
        if launch is not None:
            s += f',"launch_us":{launch / 1e3}'
            acc += launch
        if bwait is not None:
            s += f',"wait_us":{bwait / 1e3}'
            acc += bwait
    elif exe is not None:
        s += f',"execute_us":{exe / 1e3}'
        acc += exe
    if upd is not None:
        s += f',"update_us":{upd / 1e3}'
        acc += upd
    if gf is not None:
        s += f',"get_finished_us":{gf / 1e3}'
    s += f',"unaccounted_us":{(dur - acc) / 1e3}'
    if gpu_ns is not None:
        s += f',"gpu_us":{gpu_ns / 1e3}'
    if batch is not None:
        s += f',"batch":{batch}'
    if run is not None:
        s += f',"num_running":{run},"num_waiting":{wait}'
    if total is not None:
        dec = _decode_tokens(total, nst)
        s += f',"num_prefill_tokens":{total - dec},"num_decode_tokens":{dec}'
    if bq:
        s += ',"batch_queue":1'
    return f'{s},"pid":{pid}}}\n'


def _decode_tokens(total: int, dicts: tuple) -> int:
    """Decode tokens of a SchedulerOutput: requests scheduled for exactly one
    token, plus speculative-decode requests (1 + drafts each). Counted here,
    in the flusher thread, with one C-level pass (operator.countOf)."""
    if isinstance(dicts, int):
        return dicts  # counted on the engine thread: every request one token
    nst, spec = dicts
    try:
        dec = _count_of(nst.values(), 1)
        if spec:
            dec += sum(map(len, spec.values())) + len(spec)
    except Exception:
        return 0
    return min(dec, total)


def _count_of(values, x) -> int:
    import operator

    return operator.countOf(values, x)


def _fmt_worker(r: tuple) -> str:
    ts, gf, pid = r
    return f'{{"ts_us":{ts},"get_finished_us":{gf / 1e3},"pid":{pid}}}\n'


def fmt_gpu_line(ts_us: int, batch, gpu_ns: int, pid: int) -> str:
    """A GPU line: the GPU time of a batch whose step line was already written."""
    b = "null" if batch is None else batch
    return f'{{"ts_us":{ts_us},"gpu_us":{gpu_ns / 1e3},"gpu_batch":{b},"pid":{pid}}}\n'


class LineWriter:
    """Queues records, appends them as whole lines to one file.

    ``put`` is a lock-free deque append. ``flush`` formats in chunks and
    writes with ``os.write`` on an ``O_APPEND`` descriptor, so several
    processes sharing one file interleave only at line boundaries. ``head``
    (a status line) is written at the start of every flush that writes.
    """

    def __init__(self, path: str, fmt, resolve=None):
        self.path = path
        self.fmt = fmt
        # resolve() -> (gpu_ns by batch, extra lines): the GPU reads.
        self.resolve = resolve
        self.head: str | None = None
        self._q: deque = deque()
        self._lock = threading.Lock()
        self._fd: int | None = None
        self.last_flush_ns = _perf_ns()
        self.broken = False

    def put(self, rec: tuple) -> None:
        self._q.append(rec)

    def flush(self, yield_gil: bool = False, force_head: bool = False) -> None:
        if self.broken or not (self._q or force_head):
            return
        with self._lock:
            q, fmt, pop = self._q, self.fmt, self._q.popleft
            out: list[str] = [self.head] if self.head else []
            if self.resolve is not None:
                gpu, extra = self.resolve(q)
                get = gpu.get
                # Step records hold perf_counter_ns; the wall clock's offset
                # is read here, off the engine thread.
                off = _wall_ns() - _perf_ns()
                while q:
                    n = min(len(q), _CHUNK)
                    for _ in range(n):
                        r = pop()
                        out.append(fmt(r, get(r[R_BATCH]), off))
                    if yield_gil and q:
                        time.sleep(0)  # let the engine thread run between chunks
                out.extend(extra)
            else:
                while q:
                    n = min(len(q), _CHUNK)
                    out.extend([fmt(pop()) for _ in range(n)])
                    if yield_gil and q:
                        time.sleep(0)
            if out:
                self._write("".join(out).encode())
            self.last_flush_ns = _perf_ns()

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
        self._q = deque()
        self._lock = threading.Lock()
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


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
    if problems:
        d["incomplete"] = [{"hook": k, "reason": v} for k, v in sorted(problems.items())]
    return json.dumps(d, separators=(",", ":")) + "\n"


class State:
    """Hook state of this process. One instance: ``STATE``."""

    def __init__(self) -> None:
        self.step_log: str | None = None
        # Which timers are installed (decided once by hooks.install).
        self.has_schedule = self.has_meta = self.has_update = False
        self.has_execute = self.has_get_finished = self.has_launch = False
        # Hook points that could not be applied (name -> why), per process.
        self.unhooked: dict[str, str] = {}
        # The status of this process's engine, rewritten into each flush.
        self.status: dict | None = None
        # Path of the step being timed: True under step_with_batch_queue.
        self.batch_queue = False
        # True in the process that runs engine steps (set by the hooks).
        self.core_process = False
        self._writer: LineWriter | None = None
        self._worker_writer: LineWriter | None = None
        self._timer: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.step_thread = 0  # threading.get_ident() of the thread in a step
        self._exit_hooks_pid = -1
        self.pid = os.getpid()
        self.gf_ns = self.gf_n = 0
        self._gf_lock = threading.Lock()
        self.batch_seq = 0  # batch ids: one per scheduled batch, per process
        # Re-entrancy guards: the outermost wrapper times, nested calls pass.
        self.in_step = self.in_sched = self.in_meta = self.in_update = self.in_gf = False
        self.in_launch = self.in_wait = False
        self.reset_step()

    def reset_step(self) -> None:
        # Per-step sums in ns; None = the timed call did not run in this step.
        self.t_step = self.t_sched_end = 0
        self.sched_ns = self.meta_ns = self.exec_ns = self.upd_ns = None
        self.launch_ns = self.wait_ns = None
        self.sched_out = None
        self.upd_batch = None

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

    def writer(self) -> LineWriter:
        if self._writer is None:
            from .gpu import GPU

            self._writer = LineWriter(os.path.abspath(self.step_log), _fmt_step, GPU.resolve)
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
        self.reset_step()
        self.gf_ns = self.gf_n = 0
        self._gf_lock = threading.Lock()

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
        if self.core_process or self.in_step:
            # In-process worker (uniproc executor): into the next step line.
            # On the engine thread (the inline executor) a plain add; from
            # another thread, under the lock emit also takes.
            if threading.get_ident() == self.step_thread:
                self.gf_ns += dur_ns
                self.gf_n += 1
                return
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

    def emit(self, engine, t0: int, t1: int) -> None:
        """Queue the record of the step that ran from t0 to t1 (perf ns).
        Which timers are hooked (has_*) is applied when it is formatted."""
        if self.step_log is None:
            return
        gf = None
        if self.gf_n:
            with self._gf_lock:
                gf, self.gf_ns, self.gf_n = self.gf_ns, 0, 0
        run = wait = total = nst = None
        try:
            sched = engine.scheduler
            run, wait = len(sched.running), len(sched.waiting)
        except Exception:
            run = None
        out = self.sched_out
        if out is not None:
            # O(1) here. A batch of one token per request (pure decode, the
            # common case at high concurrency) is counted at once; otherwise
            # the per-request count runs in the flusher thread
            # (_decode_tokens), on the dicts vLLM built for this step, which
            # the record keeps until then.
            try:
                total = out.total_num_scheduled_tokens
                nst = out.num_scheduled_tokens
                spec = out.scheduled_spec_decode_tokens
                nst = total if not spec and total == len(nst) else (nst, spec)
            except Exception:
                total = None
        w = self._writer or self.writer()
        q = w._q
        q.append((t1, t1 - t0, self.sched_ns, self.meta_ns, self.exec_ns, self.upd_ns, gf, run, wait,
                  total, nst, self.pid, self.batch_queue, self.launch_ns, self.wait_ns, self.upd_batch))
        if len(q) >= WAKE_AT:
            if not self._wake.is_set():
                self._wake.set()
            if t1 - w.last_flush_ns >= FLUSH_INTERVAL_NS and not self.timer_alive():
                w.flush()  # no timer thread (e.g. it died): flush from the step path
        elif t1 - w.last_flush_ns >= FLUSH_INTERVAL_NS and not self.timer_alive():
            w.flush()

    def hooked(self, r: tuple) -> tuple:
        """r with the timers whose hooks are not applied to this engine's
        objects removed (absent, even if a wrapped base method ran)."""
        if self.has_schedule and self.has_update and self.has_launch:
            return r
        r = list(r)
        if not self.has_schedule:
            r[R_SCHED] = None
        if not self.has_execute:
            r[R_EXEC] = None
        if not self.has_update:
            r[R_UPD] = None
        if not self.has_launch:
            r[R_LAUNCH] = r[R_BWAIT] = None
        return tuple(r)


STATE = State()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=lambda: STATE.before_fork(),
        after_in_child=lambda: STATE.after_fork_child(),
    )
