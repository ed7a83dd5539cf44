"""The wrapper overhead benchmark's plumbing (tests/bench_overhead.py) as a
test, on vLLM's control flow (the v0.18.1 and main transcriptions,
batch-queue path, 256 and 1,024 running requests), on both timer
implementations (conftest's impl: the C timers and the Python wrappers).

What the test asserts holds on any machine: every step is written once,
and the figures are numbers, printed (visible with -s). The figures
themselves — the engine-thread CPU per step against the <= 5 us design
target, and that 1,024 running costs no more than 256 (nothing per
request on the engine thread) — are timing, the benchmark's:
``python tests/bench_overhead.py 40000 256 1024`` (paired chunks in ABBA
order, the median of paired differences; README "Overhead" has the
figures by machine). test_native.py's test_c_path_runs_no_python_per_step
is the C path's guard that load cannot blur.
"""

from __future__ import annotations

import math
import os

import pytest

from bench_overhead import measure, report

STEPS = 20_000 if os.environ.get("MBENCH_LONG") == "1" else 2_000


@pytest.mark.parametrize("version", ["0.18", "main"])
def test_overhead_per_step(step_log, capsys, version):
    for running in (256, 1024):
        r = measure(n=STEPS, chunks=20, running=running, version=version, engines=1, control=False)
        with capsys.disabled():
            print("\n[mbench_vllm overhead] " + report(r))
        assert r["steps"] == STEPS, report(r)
        assert r["lines_written"] == r["steps"] + r["warmup_lines"], report(r)
        assert math.isfinite(r["overhead_us_per_step"]), report(r)
