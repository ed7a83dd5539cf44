"""Wrapper overhead per engine step, on vLLM's control flow.

    python tests/bench_overhead.py [N] [RUNNING...]
    python tests/bench_overhead.py --procs K [N] [RUNNING...]

Drives the transcriptions of vLLM's step loop (tests/standins: v0.18.1 and
main, which cite the vLLM files they reproduce) on the batch-queue path
(async scheduling, vLLM's default; UniProcExecutor: 0.18.1's one-thread
hand-off, main's inline AsyncOutputFuture) with zero injected work, a KV
connector (so build_connector_meta and get_finished are hooked too) and a
batch of ``running`` decode requests whose SchedulerOutput dicts vLLM
builds anew every step. The same loop on fresh, unpatched classes is the
baseline, and a second uninstrumented set the A/A control; each variant
runs on 4 engines of its own (BENCH_ENGINES; see measure). N steps per
variant, in 100 chunks (BENCH_CHUNKS) run in rounds (one chunk of each
variant, in a rotating order, reversed every other round); the overhead is the
median over pairs of the difference, so load that changes during the run
cancels within a pair. The timers are the C ones where they build
(``timers c``; mbench_vllm/native.py), the Python wrappers with
MBENCH_VLLM_NATIVE=0 (``timers python``).
Reported per step:

* engine-thread CPU (``time.thread_time_ns`` of the thread that runs the
  steps): what the instrumented engine loop pays; target <= 5 us;
* wall time: adds what other threads take from the engine thread (the
  flusher formatting lines and counting tokens holds the GIL), and the
  machine's noise;
* CPU of all threads (``time.process_time_ns``).

With ``--procs K`` each measurement runs in a process of its own, K rounds
of every (version, running) pair in a rotating order, and the summary gives
per pair the median over the K processes with its 95% interval
(orderstats.median_ci), how many processes read <= 5 us, and the A/A and wall medians.
One process's figure depends on where its objects happen to lie (two builds
of one engine differ by several us per step at 1,024 running, and so do two
processes of one build): within a process the paired chunks remove the
machine's drift, across processes only the median does.

The GPU timer's cost (two CUDA event records per forward) needs torch and a
GPU: gpu/steptimer/h200_proof.py measures it on the H200.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]
# The C timers where they build (mbench_vllm/native.py); MBENCH_VLLM_NATIVE=0
# measures the Python wrappers instead.
os.environ.setdefault("MBENCH_VLLM_NATIVE", "1")

from helpers import config, engine, read_lines  # noqa: E402
from standins import VERSIONS, fake_vllm  # noqa: E402
from orderstats import median_ci  # noqa: E402


MEASURED = ("0.18", "main")  # the stand-in versions the benchmark drives


def _clocks() -> dict:
    return {"thread": time.thread_time_ns(), "process": time.process_time_ns(),
            "wall": time.perf_counter_ns()}


def _chunk(fn, n: int) -> dict:
    t = _clocks()
    for _ in range(n):
        fn()
    e = _clocks()
    return {k: (e[k] - t[k]) / n / 1000 for k in t}


def _engines(version: str, running: int, async_scheduling: bool, k: int) -> list:
    """k engines of one fresh set of stand-in classes (one plugin load)."""
    ns = fake_vllm(VERSIONS[version])
    return [engine(ns, config(decode=running, async_scheduling=async_scheduling)) for _ in range(k)]


def measure(n: int = 100_000, chunks: int = 20, running: int = 256, version: str = "main",
            async_scheduling: bool = True, engines: int | None = None, control: bool = True) -> dict:
    """Overhead of the instrumentation, µs per step (see the module doc).

    Each variant runs on ``engines`` engines of its own (BENCH_ENGINES, 4 by
    default), a chunk pair on one engine of each, in turn: two engines of
    one build differ by where their objects lie in memory, by up to a few
    µs per step at 1,024 running, and one pair alone would carry that
    difference as overhead. A third set of uninstrumented engines, measured
    in the same rotation, is the A/A control (``control``): its median
    difference against the baseline (``aa_*_us``) is what the method reads
    where there is no difference at all.
    """
    from mbench_vllm import plugin
    from mbench_vllm._recorder import STATE

    assert threading.current_thread() is threading.main_thread()
    k = engines or int(os.environ.get("BENCH_ENGINES", "4"))
    saved_env = os.environ.get("MBENCH_STEP_LOG")
    per = max(1, n // chunks)
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "engine_step.jsonl")
        plugin._reset_for_tests()
        os.environ.pop("MBENCH_STEP_LOG", None)
        # plugin inactive: never patched
        base = _engines(version, running, async_scheduling, k)
        ctl = _engines(version, running, async_scheduling, k) if control else []
        os.environ["MBENCH_STEP_LOG"] = log
        inst = _engines(version, running, async_scheduling, k)  # loads the plugin as vLLM does
        assert all(getattr(e.step_fn.__func__, "__mbench_wrapped__", False) for e in inst)
        assert not any(getattr(e.step_fn.__func__, "__mbench_wrapped__", False) for e in base + ctl)
        warm = 2000 // k
        for e in base + ctl + inst:
            _chunk(e.step_fn, warm)
        b = {x: [] for x in ("thread", "process", "wall")}
        i = {x: [] for x in b}
        a = {x: [] for x in b}
        for c in range(chunks):
            # With the control, the three variants in a rotating order; two
            # variants in ABBA order; reversed every other round, so that a
            # drift cancels over the rounds.
            order = [(b, base[c % k]), (i, inst[c % k])] + ([(a, ctl[c % k])] if ctl else [])
            r = (c // 2) % len(order) if ctl else 0  # two variants: ABBA
            order = order[r:] + order[:r]
            for res, e in (order if c % 2 == 0 else order[::-1]):
                for x, v in _chunk(e.step_fn, per).items():
                    res[x].append(v)
        STATE.flush_all()
        n_lines = len(read_lines(log))
        for e in base + ctl + inst:
            e.model_executor.shutdown()
        plugin._reset_for_tests()
    if saved_env is None:
        os.environ.pop("MBENCH_STEP_LOG", None)
    else:
        os.environ["MBENCH_STEP_LOG"] = saved_env
    from mbench_vllm._recorder import timers_status

    out = {"steps": per * chunks, "chunks": chunks, "engines": k, "warmup_lines": warm * k,
           "lines_written": n_lines, "running": running,
           "version": version, "path": "batch_queue" if async_scheduling else "step",
           "timers": timers_status()["timers"]}
    for x in b:
        out[f"baseline_{x}_us"] = statistics.median(b[x])
        out[f"instrumented_{x}_us"] = statistics.median(i[x])
        out[f"overhead_{x}_us"] = statistics.median(p - q for p, q in zip(i[x], b[x]))
        out[f"aa_{x}_us"] = statistics.median(p - q for p, q in zip(a[x], b[x])) if ctl else float("nan")
    out["overhead_us_per_step"] = out["overhead_thread_us"]
    return out


def report(r: dict) -> str:
    if math.isnan(r["aa_thread_us"]):
        ctl, wctl = f"no A/A control, {r['engines']} engines per variant", ""
    else:
        ctl = f"A/A control {r['aa_thread_us']:+.2f}, {r['engines']} engines per variant"
        wctl = f"; A/A {r['aa_wall_us']:+.2f}"
    return (
        f"vLLM {r['version']} {r['path']} path, {r['timers']} timers, {r['running']} running, "
        f"{r['steps']} steps per variant "
        f"({r['chunks']} rounds of chunks, median of differences): engine-thread CPU "
        f"{r['baseline_thread_us']:.2f} -> {r['instrumented_thread_us']:.2f} us/step "
        f"(overhead {r['overhead_thread_us']:.2f}; {ctl}); wall overhead {r['overhead_wall_us']:.2f} us/step "
        f"(baseline {r['baseline_wall_us']:.2f}{wctl}); all-threads CPU overhead {r['overhead_process_us']:.2f}"
    )


def machine() -> str:
    """This machine's speed at what the wrappers do, to read the figures by:
    the thread CPU of a perf_counter_ns() call and of a pass-through Python
    wrapper call, and the kernel's clock source."""
    tt, n = time.thread_time_ns, 200_000
    perf = time.perf_counter_ns

    def f(x):
        return x

    def wrapper(*args, **kwargs):
        return f(*args, **kwargs)

    def per(g):
        t0 = tt()
        for _ in range(n):
            g(1)
        return (tt() - t0) / n

    t0 = tt()
    for _ in range(n):
        perf()
    clock = (tt() - t0) / n
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as fh:
            src = fh.read().strip()
    except OSError:
        src = "unknown"
    return (f"machine: perf_counter_ns {clock:.0f} ns/call (clocksource {src}); a call through a "
            f"*args/**kwargs wrapper {per(wrapper) - per(f):.0f} ns more than a direct call; Python "
            f"{sys.version.split()[0]}")


def summarize(rows: list[dict], target_us: float = 5.0) -> list[str]:
    """One line per (version, running) of --procs rows (measure's dicts)."""
    out = []
    for key in sorted({(r["version"], r["running"]) for r in rows}):
        sel = [r for r in rows if (r["version"], r["running"]) == key]
        ov = [r["overhead_thread_us"] for r in sel]
        med, lo, hi = median_ci(ov)
        aa = [r["aa_thread_us"] for r in sel]
        out.append(
            f"vLLM {key[0]}, {key[1]} running, {len(sel)} processes: engine-thread overhead median {med:.2f} us/step "
            f"(95% interval {lo:.2f}-{hi:.2f}; range {min(ov):.2f}-{max(ov):.2f}; "
            f"{sum(x <= target_us for x in ov)} of {len(ov)} <= {target_us:g}); A/A median "
            f"{statistics.median(aa):+.2f} (range {min(aa):+.2f} to {max(aa):+.2f}); wall overhead median "
            f"{statistics.median(r['overhead_wall_us'] for r in sel):.2f}")
    return out


def _procs(k: int, n: int, runnings: list[int]) -> None:
    """--procs: K rounds, a process per measurement, the pairs rotated."""
    import json
    import subprocess

    pairs = [(v, r) for v in MEASURED for r in runnings]
    rows = []
    for rnd in range(k):
        shift = rnd % len(pairs)
        for version, running in pairs[shift:] + pairs[:shift]:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", version, str(running), str(n)],
                               capture_output=True, text=True, check=False)
            if p.returncode != 0:
                raise SystemExit(f"bench_overhead: the process for {version} at {running} running failed "
                                 f"(exit {p.returncode}): {p.stderr.strip()[-2000:]}")
            row = json.loads(p.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"round {rnd + 1}/{k}: {report(row)}", flush=True)
    for line in summarize(rows):
        print(line, flush=True)


def main() -> None:
    from mbench_vllm._recorder import timers_status

    args = sys.argv[1:]
    chunks = int(os.environ.get("BENCH_CHUNKS", "100"))
    if args[:1] == ["--one"]:  # one measurement, as JSON (a --procs child)
        import json

        print(json.dumps(measure(int(args[3]), chunks=chunks, running=int(args[2]), version=args[1])))
        return
    print(machine(), flush=True)
    print(f"timers: {timers_status()['timers_detail']}", flush=True)
    if args[:1] == ["--procs"]:
        if len(args) < 2 or not args[1].isdigit() or int(args[1]) < 1:
            raise SystemExit("usage: bench_overhead.py --procs K [N] [RUNNING...] (K >= 1 rounds)")
        n = int(args[2]) if len(args) > 2 else 20_000
        _procs(int(args[1]), n, [int(x) for x in args[3:]] or [256, 1024])
        return
    n = int(args[0]) if args else 100_000
    for version in MEASURED:
        for running in [int(x) for x in args[1:]] or [256, 1024]:
            print(report(measure(n, chunks=chunks, running=running, version=version)), flush=True)


if __name__ == "__main__":
    main()
