"""Scenarios on main's stand-ins (tests/standins/main.py cites the vLLM
sources): a platform scheduler class created after plugin load, async
scheduling with a known GPU time per batch on the inline (UniProcExecutor)
path, main's deferred sampling, and the no-op connector through main's
factory with the hybrid KV cache manager on and off.
"""

from __future__ import annotations

import importlib
import statistics

import pytest

from helpers import MS, US, Timings, config, engine, fake_vllm, flush, read_lines, run_steps
from standins import VERSIONS


def test_platform_scheduler_created_after_plugin_load(step_log):
    """A platform plugin's scheduler subclass, defined after the plugin
    loaded and overriding schedule() without calling super(): its schedule
    time is schedule_us, not execute_us, on every line."""
    ns = fake_vllm(VERSIONS["main"])
    ns.plugins.load_general_plugins()  # the plugin patches vLLM's Scheduler first
    from standins.common import make_scheduler_output, perf, spin

    class PlatformScheduler(ns.Scheduler):
        def schedule(self):
            t = self.vllm_config.timings
            t0 = perf()
            spin(t.schedule)
            so = make_scheduler_output(self.vllm_config, self.steps)
            self.steps += 1
            t.note("schedule", perf() - t0)
            return so

    t = Timings(schedule=10 * MS, execute=1 * MS)
    cfg = config(t, connector=None, scheduler_cls=PlatformScheduler)
    eng = engine(ns, cfg)
    assert type(eng.scheduler) is PlatformScheduler
    t.truth.clear()
    run_steps(eng, 8)
    flush()
    lines = read_lines(step_log)
    assert len(lines) == 8
    for ln, truth_ns in zip(lines, t.truth["schedule"]):
        assert ln["schedule_us"] >= truth_ns / 1000
        assert ln["execute_us"] >= 1000
    med_sched = statistics.median(ln["schedule_us"] for ln in lines)
    med_exec = statistics.median(ln["execute_us"] for ln in lines)
    med_truth = statistics.median(t.truth["schedule"]) / 1000
    assert med_sched == pytest.approx(med_truth, rel=0.1)
    # The schedule time is not in execute_us: that holds the 1 ms forward.
    med_fwd = statistics.median(t.truth["execute"]) / 1000
    assert med_fwd <= med_exec < med_fwd + med_truth / 2


def _gpu_run(step_log, n, gpu_ns, **kw):
    ns = fake_vllm(VERSIONS["main"])
    # Engine-thread work is small against the GPU's, so the run stays
    # GPU-bound even when a loaded machine stretches the busy-waits.
    t = Timings(schedule=200 * US, execute=300 * US, update=100 * US, gpu=gpu_ns)
    cfg = config(t, connector=None, async_scheduling=True, **kw)
    eng = engine(ns, cfg)
    assert eng.step_fn.__func__.__name__ == "step_with_batch_queue"
    t.truth.clear()
    run_steps(eng, n)
    flush()
    return t, read_lines(step_log)


def test_async_scheduling_recovers_gpu_time(step_log):
    """Async scheduling, inline executor, 20 ms of GPU work per batch against
    0.6 ms of engine-thread work per step: the engine is GPU-bound. Each line
    must say so (batch_queue, wait_us > 0), wait_us must be the wait the
    stand-in measured itself, and the GPU time per batch (the step period
    of a GPU-bound step: schedule + launch + wait + update + unaccounted)
    must come out within 10%."""
    gpu_ms = 20
    t, lines = _gpu_run(step_log, 30, gpu_ms * MS)
    assert len(lines) == 30
    steady = lines[5:]  # past the queue's fill
    for ln in lines:
        assert ln["batch_queue"] == 1 and "execute_us" not in ln
        parts = sum(ln.get(k, 0.0) for k in ("schedule_us", "launch_us", "wait_us", "update_us"))
        assert ln["unaccounted_us"] == pytest.approx(ln["step_duration_us"] - parts, abs=0.002)
        assert ln["unaccounted_us"] >= 0
    # The launch is the CPU side of the forward (0.3 ms injected, as the
    # stand-in measured it on this machine), not the GPU.
    fwd = statistics.median(t.truth["execute"][5:]) / 1000
    assert fwd >= 300
    launch = statistics.median(ln["launch_us"] for ln in steady)
    assert fwd <= launch < 1.5 * fwd + 200  # plus the executor's own Python
    # wait_us is the blocking the stand-in measured in get_output().
    waits = [ln["wait_us"] for ln in steady]
    truth_waits = [ns_ / 1000 for ns_ in t.truth["gpu_wait"]][5:]
    assert statistics.median(waits) == pytest.approx(statistics.median(truth_waits), rel=0.1)
    assert statistics.median(waits) > 0.8 * gpu_ms * 1000  # most of the step is the GPU
    assert min(waits) > 0  # GPU-bound on every steady line
    # GPU time per batch: the period of GPU-bound steps.
    period = statistics.median(ln["step_duration_us"] for ln in steady)
    assert period == pytest.approx(gpu_ms * 1000, rel=0.1)


def test_async_cpu_bound_has_no_wait(step_log):
    """The same engine with 50 µs of GPU work: CPU-bound, the wait is a
    small part of the step and the period is the engine thread's work."""
    t, lines = _gpu_run(step_log, 30, 50 * US)
    steady = lines[5:]
    cpu = statistics.median(ln["schedule_us"] + ln["launch_us"] + ln.get("update_us", 0) for ln in steady)
    assert statistics.median(ln.get("wait_us", 0) for ln in steady) < cpu / 4
    assert statistics.median(ln["step_duration_us"] for ln in steady) >= 600


def test_deferred_sampling_is_launch_time(step_log):
    """Every 3rd batch waits for structured-output tokens: main launches its
    sampling after update_from_output, in the same call. That launch is in
    launch_us; the identity still holds."""
    t, lines = _gpu_run(step_log, 30, 2 * MS, deferred_every=3)
    assert len(lines) == 30
    for ln in lines:
        parts = sum(ln.get(k, 0.0) for k in ("schedule_us", "launch_us", "wait_us", "update_us"))
        assert ln["unaccounted_us"] == pytest.approx(ln["step_duration_us"] - parts, abs=0.002)
        assert ln["launch_us"] >= 300  # the forward's CPU side, every call


@pytest.mark.parametrize("hma_off", [True, False])
def test_noop_through_main_factory_hma(step_log, hma_off):
    ns = fake_vllm(VERSIONS["main"])
    import mbench_vllm.noop as noop

    noop = importlib.reload(noop)
    assert issubclass(noop.MbenchNoopConnector, ns.SupportsHMA)
    cfg = config(connector="MbenchNoopConnector", module_path="mbench_vllm.noop",
                 disable_hybrid_kv_cache_manager=hma_off)
    for role in (ns.KVConnectorRole.SCHEDULER, ns.KVConnectorRole.WORKER):
        c = ns.KVConnectorFactory.create_connector(config=cfg, role=role, kv_cache_config="kvcfg")
        assert type(c) is noop.MbenchNoopConnector and c._kv_cache_config == "kvcfg"
        assert c.request_finished_all_groups(object(), ([1], [2])) == (False, None)
    # A connector that is not SupportsHMA is refused with HMA on, as vLLM does.
    cfg2 = config(disable_hybrid_kv_cache_manager=hma_off)
    if hma_off:
        ns.KVConnectorFactory.create_connector(config=cfg2, role=ns.KVConnectorRole.WORKER,
                                               kv_cache_config="kvcfg")
    else:
        with pytest.raises(ValueError, match="does not support HMA"):
            ns.KVConnectorFactory.create_connector(config=cfg2, role=ns.KVConnectorRole.WORKER,
                                                   kv_cache_config="kvcfg")


def test_multiproc_tp2_worker_files(step_log):
    """TP = 2 on main's multiproc executor with async scheduling: the engine
    process only sends (launch_us small), waits for the GPU (wait_us), and
    each worker process writes its own get_finished file, one line per
    forward; no step line claims a get_finished it did not run."""
    import glob
    import os

    ns = fake_vllm(VERSIONS["main"])
    import mbench_vllm.noop as noop

    importlib.reload(noop)
    t = Timings(schedule=200 * US, execute=300 * US, gpu=10 * MS)
    cfg = config(t, connector="MbenchNoopConnector", module_path="mbench_vllm.noop",
                 async_scheduling=True, tp=2)
    eng = ns.EngineCore(cfg, ns.MultiprocExecutor, log_stats=False)
    try:
        run_steps(eng, 12)
    finally:
        eng.model_executor.shutdown()
    flush()
    lines = read_lines(step_log)
    assert len(lines) == 12
    for ln in lines:
        assert ln["batch_queue"] == 1 and "get_finished_us" not in ln
    steady = lines[3:]
    # Launching only sends the call (the 0.3 ms forward runs in the workers).
    assert statistics.median(ln["launch_us"] for ln in steady) < 2000
    assert statistics.median(ln["wait_us"] for ln in steady) > 5000  # the 10 ms GPU
    base = step_log[: -len(".jsonl")]
    files = sorted(glob.glob(base + ".worker.*.jsonl"))
    assert len(files) == 2, files
    pids = {p.pid for p in eng.model_executor.procs}
    for f in files:
        wl = read_lines(f)
        assert {ln["pid"] for ln in wl} <= pids
        # One get_finished per forward each worker ran: every scheduled batch.
        assert len(wl) == 12, (f, len(wl))
        assert os.path.basename(f).startswith("engine_step.worker.")
