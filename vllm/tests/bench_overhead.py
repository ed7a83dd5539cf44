"""Wrapper overhead per engine step (run: python tests/bench_overhead.py [N]).

Drives the 0.10 stand-in's synchronous step (tests/standins/v0_10.py) with
zero injected work and a KV connector, so every hook runs each step: step,
schedule, build_connector_meta, update_from_output (+ derived execute) and
the worker-side get_finished, plus queueing the record and writing the real
file. The same loop on fresh, unpatched stand-in classes is the baseline.

The batch holds ``running`` decode requests (default 256: the per-step work
of the token counts grows with it). N steps per variant, in 20 chunks run
in pairs (baseline chunk, instrumented chunk); the overhead is the median
over pairs of the difference, so load that changes during the run cancels
within a pair. Reported:

* engine-thread CPU time per step (``time.thread_time_ns``): what the
  instrumented engine loop pays; the design target is <= 5 us;
* CPU time of all threads (``time.process_time_ns``): adds the background
  thread's formatting and writes;
* wall time per step, for reference (noisy on a loaded machine).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

from helpers import config, engine  # noqa: E402
from standins import VERSIONS, fake_vllm  # noqa: E402


CLOCKS = {
    "thread": time.thread_time_ns,
    "process": time.process_time_ns,
    "wall": time.perf_counter_ns,
}


def _chunk(fn, n: int) -> dict:
    t = {k: c() for k, c in CLOCKS.items()}
    for _ in range(n):
        fn()
    return {k: (c() - t[k]) / n / 1000 for k, c in CLOCKS.items()}


def measure(n: int = 100_000, chunks: int = 20, running: int = 256) -> dict:
    """Overhead of the instrumentation, µs per step (see module doc)."""
    from mbench_vllm import plugin
    from mbench_vllm._recorder import STATE

    mod = VERSIONS["0.10"]
    saved_env = os.environ.get("MBENCH_STEP_LOG")
    per = max(1, n // chunks)
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "engine_step.jsonl")
        plugin._reset_for_tests()
        # Baseline: stand-in classes never patched (plugin not active).
        os.environ.pop("MBENCH_STEP_LOG", None)
        base = engine(fake_vllm(mod), config(decode=running))
        # Instrumented: fresh classes; the engine loads the plugin as vLLM does.
        os.environ["MBENCH_STEP_LOG"] = log
        inst = engine(fake_vllm(mod), config(decode=running))
        assert getattr(inst.step_fn.__func__, "__mbench_wrapped__", False)
        assert not getattr(base.step_fn.__func__, "__mbench_wrapped__", False)
        _chunk(base.step_fn, 2000)
        _chunk(inst.step_fn, 2000)
        b = {k: [] for k in CLOCKS}
        i = {k: [] for k in CLOCKS}
        for _ in range(chunks):
            for res, fn in ((b, base.step_fn), (i, inst.step_fn)):
                for k, v in _chunk(fn, per).items():
                    res[k].append(v)
        STATE.flush_all()
        with open(log, "rb") as f:
            n_lines = sum(1 for _ in f)
        plugin._reset_for_tests()
    if saved_env is None:
        os.environ.pop("MBENCH_STEP_LOG", None)
    else:
        os.environ["MBENCH_STEP_LOG"] = saved_env
    import statistics

    out = {"steps": per * chunks, "chunks": chunks, "lines_written": n_lines, "running": running}
    for k in CLOCKS:
        out[f"baseline_{k}_us"] = statistics.median(b[k])
        out[f"instrumented_{k}_us"] = statistics.median(i[k])
        out[f"overhead_{k}_us"] = statistics.median(x - y for x, y in zip(i[k], b[k]))
    out["overhead_us_per_step"] = out["overhead_thread_us"]
    return out


def report(r: dict) -> str:
    return (
        f"{r['steps']} fake steps per variant, {r['running']} running requests "
        f"({r['chunks']} paired chunks, median of the differences): "
        f"engine-thread CPU {r['baseline_thread_us']:.2f} -> {r['instrumented_thread_us']:.2f} "
        f"us/step (overhead {r['overhead_thread_us']:.2f}); all-threads CPU overhead "
        f"{r['overhead_process_us']:.2f}; wall overhead {r['overhead_wall_us']:.2f} us/step"
    )


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    for running in [int(x) for x in sys.argv[2:]] or [256, 1024]:
        print(report(measure(n, running=running)))


if __name__ == "__main__":
    main()
