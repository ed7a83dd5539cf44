"""The contract between the plugin and mbench's Go side: a step log the
plugin writes (async scheduling, CPU-bound, a connector, GPU time measured
on the fake GPU) has the record kinds and keys of the sample checked in at
probes/testdata/plugin_batch_queue.jsonl. MBENCH_WRITE_SAMPLE=1 rewrites
the sample and, beside it, the plugin's raw log (binary step records and a
status line, plugin_batch_queue.steplog): the Go tests summarize both and
decode the raw log to exactly the lines this package's reader
(mbench_vllm.steplog) made of it (probes: TestPluginSampleLog,
TestPluginBinaryMatchesPythonReader).
"""

from __future__ import annotations

import json
import os

from helpers import US, Timings, config, engine, fake_vllm, flush, read_all, run_steps, shutdown
from standins import VERSIONS

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "probes", "testdata", "plugin_batch_queue.jsonl")
RAW = SAMPLE[:-len(".jsonl")] + ".steplog"


def _kinds(lines):
    """Line kind -> the set of keys lines of that kind carry."""
    out: dict = {}
    for d in lines:
        kind = "status" if "status" in d else "gpu" if "gpu_batch" in d else \
            "bq_collect" if "update_us" in d else "bq_early"
        out.setdefault(kind, set()).update(d)
    return out


def test_plugin_log_matches_the_go_sample(step_log):
    ns = fake_vllm(VERSIONS["main"], gpu=True)
    t = Timings(schedule=1500 * US, execute=300 * US, update=800 * US, gpu=300 * US, kernels=2, launch=2 * US,
                gpu_vary=True)
    eng = engine(ns, config(t, connector="SlowConnector", async_scheduling=True))
    run_steps(eng, 12)
    shutdown(eng)
    flush()
    lines = read_all(step_log)
    got = _kinds(lines)
    if os.environ.get("MBENCH_WRITE_SAMPLE") == "1":
        with open(SAMPLE, "w", encoding="utf-8") as f:
            for d in lines:
                f.write(json.dumps(d, separators=(",", ":")) + "\n")
        with open(step_log, "rb") as src, open(RAW, "wb") as dst:
            dst.write(src.read())
    with open(step_log, "rb") as f:
        assert f.read(1) == b"{", "the log starts with the engine's status line"
    with open(SAMPLE, encoding="utf-8") as f:
        want = _kinds(json.loads(x) for x in f if x.strip())
    assert {k: sorted(v) for k, v in got.items() if k != "gpu"} == \
        {k: sorted(v) for k, v in want.items() if k != "gpu"}
    st = [d for d in lines if d.get("status") == "engine"][-1]
    assert st["gpu_time"] == "measured" and "incomplete" not in st
