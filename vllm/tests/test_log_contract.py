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
        # gpu_host_bound is set where a launch was slow (a loaded machine
        # can make any line so): the Go tests read it on lines of its own.
        out.setdefault(kind, set()).update(k for k in d if k != "gpu_host_bound")
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


HOST_SAMPLE = SAMPLE.replace("plugin_batch_queue", "plugin_host_bound")


def test_plugin_host_bound_log_matches_the_go_sample(step_log):
    """An eager forward on an idle GPU (4 kernels, each launched after 150 µs
    of host work): the plugin marks the collecting lines' spans host-bound.
    MBENCH_WRITE_SAMPLE=1 writes the raw log and its decoded lines beside
    the batch-queue sample (plugin_host_bound.steplog/.jsonl), which the Go
    side summarizes as not measured (probes: TestPluginHostBoundSample)."""
    ns = fake_vllm(VERSIONS["main"], gpu=True)
    t = Timings(schedule=1500 * US, execute=100 * US, update=800 * US, gpu=300 * US, kernels=4, launch=150 * US)
    eng = engine(ns, config(t, connector=None, async_scheduling=True))
    run_steps(eng, 12)
    shutdown(eng)
    flush()
    lines = read_all(step_log)
    timed = [d for d in lines if "gpu_us" in d]
    assert len(timed) >= 10 and all(d.get("gpu_host_bound") == 1 for d in timed), timed
    if os.environ.get("MBENCH_WRITE_SAMPLE") == "1":
        with open(HOST_SAMPLE, "w", encoding="utf-8") as f:
            for d in lines:
                f.write(json.dumps(d, separators=(",", ":")) + "\n")
        with open(step_log, "rb") as src, open(HOST_SAMPLE[:-len(".jsonl")] + ".steplog", "wb") as dst:
            dst.write(src.read())
    with open(HOST_SAMPLE, encoding="utf-8") as f:
        want = [json.loads(x) for x in f if x.strip()]
    assert {k for d in want for k in d} == {k for d in lines for k in d}


def test_gpu_record_host_bound_flag_round_trip():
    """A GPU record carries the host-bound flag in its fifth slot; a record
    of four slots (written before the flag existed) still reads, unmarked;
    a step record's flag bit 1 reads as gpu_host_bound."""
    import struct

    from mbench_vllm import steplog

    marked = steplog.pack_gpu(10, 3, 900_000, 77, True)
    plain = steplog.pack_gpu(11, 4, 2_000, 77)
    old = struct.pack("<5q", steplog.header(steplog.KIND_GPU, 32), 12, 5, 3_000, 77)
    got = steplog.decode(marked + plain + old)
    assert got == [
        {"ts_us": 10, "gpu_us": 900.0, "gpu_batch": 3, "pid": 77, "gpu_host_bound": 1},
        {"ts_us": 11, "gpu_us": 2.0, "gpu_batch": 4, "pid": 77},
        {"ts_us": 12, "gpu_us": 3.0, "gpu_batch": 5, "pid": 77},
    ]
    v = [0] * steplog.STEP_SLOTS
    v[steplog.S_TS], v[steplog.S_DUR], v[steplog.S_GPU], v[steplog.S_BATCH] = 1, 5_000, 800_000, 2
    v[steplog.S_RUN] = v[steplog.S_TOTAL] = -1
    v[steplog.S_FLAGS] = steplog.F_BQ | steplog.F_GPU_HOST
    d = steplog.step_dict(v)
    assert d["gpu_us"] == 800.0 and d["gpu_host_bound"] == 1 and d["batch_queue"] == 1
    v[steplog.S_FLAGS] = steplog.F_BQ
    assert "gpu_host_bound" not in steplog.step_dict(v)
