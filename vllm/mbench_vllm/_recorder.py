"""Per-process step accumulators and the buffered JSONL writers.

Hot path (the engine-core thread): the wrappers in ``hooks`` add
``perf_counter_ns`` differences to attributes of ``STATE``; at the end of a
step ``STATE.emit`` queues one small tuple. Formatting and ``os.write``
happen in a background thread (every 0.5 s, in chunks that yield the GIL),
at exit, and before a fork — so a step pays a few attribute updates and one
deque append, not JSON formatting.

Field semantics (also in README.md):

* A timer field is written only when its hook is installed in this process
  *and* the hooked call ran during the step. Absent never means 0.
* ``unaccounted_us = step_duration_us - (schedule_us + execute_us + update_us)``
  (an absent part counts as 0 here: its time is, by definition, unaccounted).
  ``build_meta_us`` is nested in ``schedule_us`` and ``get_finished_us`` in
  ``execute_us``; they are never subtracted a second time.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque

_perf_ns = time.perf_counter_ns
_wall_ns = time.time_ns

FLUSH_INTERVAL_NS = 1_000_000_000  # lines reach the file at least once a second
_TIMER_PERIOD_S = 0.5
_CHUNK = 256  # records formatted between GIL yields


def _fmt_step(r: tuple) -> str:
    ts, dur, sch, meta, exe, upd, gf, run, wait, total, dec, pid, bq, launch, bwait = r
    acc = 0
    s = f'{{"ts_us":{ts},"step_duration_us":{dur / 1e3}'
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
    if run is not None:
        s += f',"num_running":{run},"num_waiting":{wait}'
    if total is not None:
        dec = _decode_tokens(total, dec)
        s += f',"num_prefill_tokens":{total - dec},"num_decode_tokens":{dec}'
    if bq:
        s += ',"batch_queue":1'
    return f'{s},"pid":{pid}}}\n'


def _decode_tokens(total: int, dicts: tuple) -> int:
    """Decode tokens of a SchedulerOutput: requests scheduled for exactly one
    token, plus speculative-decode requests (1 + drafts each)."""
    nst, spec = dicts
    try:
        dec = list(nst.values()).count(1)
        if spec:
            dec += sum(map(len, spec.values())) + len(spec)
    except Exception:
        return 0
    return min(dec, total)


def _fmt_worker(r: tuple) -> str:
    ts, gf, pid = r
    return f'{{"ts_us":{ts},"get_finished_us":{gf / 1e3},"pid":{pid}}}\n'


class LineWriter:
    """Queues records, appends them as whole lines to one file.

    ``put`` is a lock-free deque append. ``flush`` formats in chunks and
    writes with ``os.write`` on an ``O_APPEND`` descriptor, so several
    processes sharing one file interleave only at line boundaries.
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

    def flush(self, yield_gil: bool = False) -> None:
        if not self._q or self.broken:
            return
        with self._lock:
            q, fmt, pop = self._q, self.fmt, self._q.popleft
            out: list[str] = []
            while q:
                n = min(len(q), _CHUNK)
                out.extend([fmt(pop()) for _ in range(n)])
                if yield_gil and q:
                    time.sleep(0)  # let the engine thread run between chunks
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


class State:
    """Hook state of this process. One instance: ``STATE``."""

    def __init__(self) -> None:
        self.step_log: str | None = None
        # Which timers are installed (decided once by hooks.install).
        self.has_schedule = self.has_meta = self.has_update = False
        self.has_execute = self.has_get_finished = self.has_launch = False
        # Hook points that could not be applied (name -> why), per process.
        self.unhooked: dict[str, str] = {}
        # Path of the step being timed: True under step_with_batch_queue.
        self.batch_queue = False
        # True in the process that runs engine steps (set by the hooks).
        self.core_process = False
        self._writer: LineWriter | None = None
        self._worker_writer: LineWriter | None = None
        self._timer: threading.Thread | None = None
        self._stop = threading.Event()
        self._exit_hooks_pid = -1
        self.pid = os.getpid()
        self.gf_ns = self.gf_n = 0
        self._gf_lock = threading.Lock()
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
            t = threading.Thread(target=self._run_timer, name="mbench-flush", daemon=True)
            t.start()
            self._timer = t

    def _run_timer(self) -> None:
        stop = self._stop
        while not stop.wait(_TIMER_PERIOD_S):
            self.flush_all(yield_gil=True)

    def timer_alive(self) -> bool:
        t = self._timer
        return t is not None and t.is_alive()

    def writer(self) -> LineWriter:
        if self._writer is None:
            self._writer = LineWriter(os.path.abspath(self.step_log), _fmt_step)
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
        self.pid = os.getpid()
        self.in_step = self.in_sched = self.in_meta = self.in_update = self.in_gf = False
        self.in_launch = self.in_wait = False
        self.reset_step()
        self.gf_ns = self.gf_n = 0
        self._gf_lock = threading.Lock()

    def shutdown(self) -> None:
        """Flush and stop the timer thread (tests; at exit we only flush)."""
        self._stop.set()
        self.flush_all()
        if self._timer is not None:
            self._timer.join(timeout=2)
        self._timer = None

    # ---- recording (hot path) ------------------------------------------
    def record_get_finished(self, dur_ns: int, t_end_ns: int) -> None:
        if self.core_process or self.in_step:
            # In-process worker (uniproc executor): into the next step line.
            # The lock matters when an executor thread runs the forward.
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
        """Queue the record of the step that ran from t0 to t1 (perf ns)."""
        if self.step_log is None:
            return
        gf = None
        if self.gf_n:
            with self._gf_lock:
                gf, self.gf_ns, self.gf_n = self.gf_ns, 0, 0
        run = wait = total = dec = None
        sched = getattr(engine, "scheduler", None)
        if sched is not None:
            try:
                run, wait = len(sched.running), len(sched.waiting)
            except Exception:
                run = None
        out = self.sched_out
        if out is not None:
            # O(1) here: the per-request count runs in the formatter thread
            # (_decode_tokens), on dicts vLLM builds anew for every step.
            try:
                total = out.total_num_scheduled_tokens
                dec = (out.num_scheduled_tokens, out.scheduled_spec_decode_tokens)
            except Exception:
                total = None
        w = self._writer or self.writer()
        w.put((
            _wall_ns() // 1000,
            t1 - t0,
            # A timer whose hook is not applied to this engine's objects is
            # absent, even if a wrapped base method ran underneath.
            self.sched_ns if self.has_schedule else None,
            self.meta_ns,
            self.exec_ns if self.has_execute else None,
            self.upd_ns if self.has_update else None,
            gf,
            run,
            wait,
            total,
            dec,
            self.pid,
            self.batch_queue,
            self.launch_ns if self.has_launch else None,
            self.wait_ns if self.has_launch else None,
        ))
        if t1 - w.last_flush_ns >= FLUSH_INTERVAL_NS and not self.timer_alive():
            w.flush()  # no timer thread (e.g. it died): flush from the step path


STATE = State()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=lambda: STATE.before_fork(),
        after_in_child=lambda: STATE.after_fork_child(),
    )
