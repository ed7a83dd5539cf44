"""Scenarios on the stand-ins of v0.18.1 and main (tests/standins cites the
vLLM sources): GPU time measured with CUDA events on a fake GPU and joined
to the step that collected the batch, on both paths, GPU-bound and
CPU-bound; "not measured" without torch; the status line before the first
step; a platform scheduler class created after plugin load; main's
deferred sampling; the no-op connector through both factories with the
hybrid KV cache manager on and off; TP = 2 worker files.
"""

from __future__ import annotations

import importlib
import io
import statistics

import pytest

from helpers import (MS, US, Timings, config, engine, fake_vllm, flush, read_gpu_lines, read_lines,
                     read_status, run_steps, shutdown)
from standins import VERSIONS, fakegpu

PINNED = ("0.18", "main")


def _gpu_run(step_log, version, n, t, gpu=True, **kw):
    ns = fake_vllm(VERSIONS[version], gpu=gpu)
    cfg = config(t, connector=None, **kw)
    eng = engine(ns, cfg)
    t.truth.clear()
    run_steps(eng, n)
    shutdown(eng)
    flush()
    return eng, read_lines(step_log)


def _check_gpu_joined(lines, rel=None, host_bound=False):
    """Every line that collected a batch carries that batch's GPU time and
    id (the count of such lines is returned): never below the forward's
    kernel time in the fake GPU's own log (the profiler) — the events
    bracket the kernels, whatever the host's speed. With ``host_bound``
    (each kernel launched after 150 us of host work on an idle GPU: load
    only lengthens the host's part) most lines are marked.

    With ``rel`` (a GPU-bound engine: the GPU is behind the host) a line
    not marked host-bound holds at most 5% host time and the unmarked
    lines' median is within ``rel`` of the kernel time. Without it (a
    CPU-bound engine on the fake GPU, which runs on the host's clock) how
    many spans a loaded host stretches, and by how much, is the machine's
    speed: printed (pytest -s), not asserted."""
    dev = fakegpu.device()
    ratios, marked = [], 0
    for ln in lines:
        if "update_us" not in ln:
            assert "gpu_us" not in ln and "batch" not in ln  # an early return collected nothing
            continue
        b = ln["batch"]
        truth_us = dev.kernel_ns(b - 1) / 1000  # batch ids count schedule() calls from 1
        assert truth_us > 0, ln
        assert ln["gpu_us"] >= 0.999 * truth_us, (ln, truth_us)
        assert ln.get("gpu_host_bound", 0) in (0, 1), ln
        if ln.get("gpu_host_bound") == 1:
            marked += 1
            continue
        if rel is not None:
            assert ln["gpu_us"] <= truth_us / 0.95 + 0.5, ("a span with host time not marked host-bound", ln, truth_us)
        ratios.append(ln["gpu_us"] / truth_us)
    print(f"[gpu join] {marked} of {marked + len(ratios)} spans host-bound; unmarked span / kernel time: "
          f"median {statistics.median(ratios) if ratios else float('nan'):.3f}, max {max(ratios, default=float('nan')):.3f}")
    if host_bound:
        assert marked >= 0.9 * (marked + len(ratios)), (marked, ratios)
        return marked
    if rel is not None:
        assert marked <= 0.5 * (marked + len(ratios)), (marked, ratios)
        assert statistics.median(ratios) == pytest.approx(1, abs=rel), ratios
    return marked + len(ratios)


@pytest.mark.parametrize("version", PINNED)
@pytest.mark.parametrize("async_scheduling", [True, False])
def test_gpu_time_gpu_bound(step_log, version, async_scheduling):
    """4-7 ms of kernels per batch against ~1 ms of engine-thread work: the
    engine waits on the GPU. gpu_us is the forward's kernel time (the
    device's log), not the step period, on every collecting line."""
    t = Timings(schedule=300 * US, execute=200 * US, update=200 * US, gpu=4 * MS, kernels=5,
                launch=5 * US, sample_gpu=100 * US, gpu_vary=True)
    eng, lines = _gpu_run(step_log, version, 30, t, async_scheduling=async_scheduling)
    bq = eng.batch_queue is not None
    assert bq == async_scheduling
    assert all(("batch_queue" in ln) == bq for ln in lines)
    assert _check_gpu_joined(lines, rel=0.03) >= 28
    if bq:  # the engine thread waits for the GPU: on a quiet host most of a step (> 2 ms); a slowed host waits less
        print(f"[gpu join] median wait_us {statistics.median(ln['wait_us'] for ln in lines[3:]):.0f}")
    st = read_status(step_log)
    assert st and st[0]["gpu_time"] == "measured" and "_model_forward" in st[0]["gpu_hook"]


@pytest.mark.parametrize("version", PINNED)
def test_gpu_time_cpu_bound_async(step_log, version):
    """The seed-003 case: async scheduling, 300 µs of GPU work per batch,
    ~3 ms of engine-thread work per step (GPU idle ~90%): the step period is
    the CPU's, and every collecting line carries its own batch's GPU time,
    never below its 300-525 µs of kernels."""
    t = Timings(schedule=1500 * US, execute=500 * US, update=1000 * US, gpu=300 * US, kernels=2,
                launch=2 * US, sample_gpu=20 * US, gpu_vary=True)
    eng, lines = _gpu_run(step_log, version, 30, t, async_scheduling=True)
    steady = [ln for ln in lines[3:] if "update_us" in ln]
    assert statistics.median(ln["step_duration_us"] for ln in steady) > 2500
    # Each batch's gpu_us is at least its 300-525 µs of kernels (checked per
    # line); how close a CPU-bound span stays to them on a loaded host (the
    # fake GPU runs on the host's clock) is printed, not asserted.
    assert _check_gpu_joined(lines) >= 25
    print(f"[gpu join] median wait_us {statistics.median(ln['wait_us'] for ln in steady):.0f}, "
          f"gpu_us {statistics.median(ln['gpu_us'] for ln in steady):.0f}, "
          f"step_duration_us {statistics.median(ln['step_duration_us'] for ln in steady):.0f}")


@pytest.mark.parametrize("version", PINNED)
@pytest.mark.parametrize("async_scheduling", [True, False])
def test_gpu_time_host_bound(step_log, version, async_scheduling):
    """An eager forward on an idle GPU: 4 kernels of 75 µs, each launched
    after 150 µs of host work, so the GPU waits on the host and the events'
    span (~675 µs) holds host time beside 300 µs of kernels. Such a span is
    marked host-bound on its line (never passed off as GPU time), the
    status says measured, and the summary leaves it out of gpu_us."""
    from mbench_vllm import check

    t = Timings(schedule=1500 * US, execute=100 * US, update=1000 * US, gpu=300 * US, kernels=4,
                launch=150 * US, sample_gpu=20 * US)
    eng, lines = _gpu_run(step_log, version, 30, t, async_scheduling=async_scheduling)
    assert _check_gpu_joined(lines, rel=0.05, host_bound=True) >= 25
    dev = fakegpu.device()
    for ln in lines:
        if ln.get("gpu_host_bound"):
            assert ln["gpu_us"] > 1.5 * dev.kernel_ns(ln["batch"] - 1) / 1000, ln
    out = io.StringIO()
    check.summarize(str(step_log), out)
    assert "GPU time: not measured: every GPU-timed batch was host-bound" in out.getvalue(), out.getvalue()


@pytest.mark.parametrize("version", PINNED)
def test_gpu_time_sampled_by_default(step_log, impl, version, monkeypatch):
    """MBENCH_GPU_TIME unset: a random 1 in 16 forwards is timed (behind the
    C gate where the C timers load, else the Python one). Over 800 steps
    the timed count is within 5 sd of 800/16 (binomial; outside it once in
    ~10^6 runs); every timed batch's gpu_us is at least its kernel time
    (a span's host time on the host-clocked fake GPU is load's); the other
    lines carry no gpu_us (never an estimate); the status line says 1 in 16
    and which gate."""
    from mbench_vllm import gpu

    monkeypatch.delenv("MBENCH_GPU_TIME")
    t = Timings(schedule=20 * US, execute=20 * US, update=20 * US, gpu=150 * US, kernels=1, launch=2 * US,
                sample_gpu=5 * US, gpu_vary=True)
    eng, lines = _gpu_run(step_log, version, 800, t, async_scheduling=True)
    collected = [ln for ln in lines if "update_us" in ln]
    timed = [ln for ln in collected if "gpu_us" in ln]
    late = read_gpu_lines(step_log)
    n, k, p = len(collected), len(timed) + len(late), 1 / gpu.DEFAULT_EVERY
    assert n >= 790, n
    sd = (n * p * (1 - p)) ** 0.5
    assert abs(k - n * p) <= 5 * sd, (k, n * p, sd)
    dev = fakegpu.device()
    for ln in timed:
        truth = dev.kernel_ns(ln["batch"] - 1) / 1000
        assert ln["gpu_us"] >= 0.999 * truth, (ln, truth)
    st = read_status(step_log)
    want_gate = "c gate" if impl == "c" else "python gate"
    assert st and st[0]["gpu_time"] == "measured" and st[0]["gpu_sample_every"] == 16, st
    assert "a random 1 in 16 forwards" in st[0]["gpu_hook"] and want_gate in st[0]["gpu_hook"], st[0]["gpu_hook"]


@pytest.mark.parametrize("version", PINNED)
def test_gpu_events_of_the_c_timers(step_log, impl, version, fake_libcuda):
    """Where the C timers load, the GPU timer's events are their own, on the
    CUDA driver's API (here the fake driver, which keeps the fake GPU's
    stream): every collecting line's gpu_us is the batch's kernel time as
    on torch's events, the status names the driver's events, two records
    per forward, and the reads leave the reading thread's context stack as
    they found it. With the Python wrappers, torch's events."""
    t = Timings(schedule=300 * US, execute=200 * US, update=200 * US, gpu=2 * MS, kernels=3, launch=5 * US,
                sample_gpu=50 * US, gpu_vary=True)
    lib = fake_libcuda[1] if fake_libcuda else None
    before = lib.fakecu_records() if lib else 0
    eng, lines = _gpu_run(step_log, version, 30, t, async_scheduling=True)
    assert _check_gpu_joined(lines, rel=0.03) >= 28
    hook = read_status(step_log)[0]["gpu_hook"]
    if impl == "c":
        assert "CUDA driver events" in hook, hook
        forwards = sum(1 for ln in lines if "batch" in ln)  # every launched batch's forward was timed
        assert lib.fakecu_records() - before >= 2 * (forwards - 2), (lib.fakecu_records() - before, forwards)
        assert lib.fakecu_depth() == 0
    else:
        assert "torch.Event" in hook and "CUDA driver events" not in hook, hook


def test_gpu_driver_error_stops_the_timer_not_the_engine(step_log, impl, fake_libcuda, monkeypatch):
    """A CUDA error on a record (the fake driver fails the 21st from now
    with 700, CUDA_ERROR_ILLEGAL_ADDRESS): the timer stops and says so in
    the status line (GPU time not measured, the call and the error), the
    engine runs on, the lines written before it keep their gpu_us."""
    if impl != "c":
        pytest.skip("the driver's events are the C timers'")
    lib = fake_libcuda[1]
    t = Timings(schedule=300 * US, execute=200 * US, update=200 * US, gpu=1 * MS, kernels=2, launch=5 * US)
    ns = fake_vllm(VERSIONS["main"], gpu=True)
    eng = engine(ns, config(t, connector=None, async_scheduling=True))
    lib.fakecu_fail_records_after(20, 700)
    try:
        run_steps(eng, 30)
    finally:
        lib.fakecu_fail_records_after(-1, 0)
    shutdown(eng)
    flush()
    lines = read_lines(step_log)
    assert len(lines) == 30
    timed = [ln for ln in lines if "gpu_us" in ln]
    assert 5 <= len(timed) <= 11, len(timed)
    st = read_status(step_log)[-1]
    assert st["gpu_time"] == "not_measured" and "cuEventRecord failed: CUDA driver error 700" in st["gpu_reason"], st


@pytest.mark.parametrize("env,want", [
    ({"MBENCH_LIBCUDA": "/nonexistent/libcuda.so.1"}, "the CUDA driver's events were not used: RuntimeError: /nonexistent/libcuda.so.1: dlopen failed"),
    ({"MBENCH_GPU_EVENTS": "torch"}, "the CUDA driver's events were not used: MBENCH_GPU_EVENTS=torch")])
def test_gpu_events_fall_back_to_torch(step_log, impl, monkeypatch, env, want):
    """No usable CUDA driver library (or MBENCH_GPU_EVENTS=torch): torch's
    events, and the status line says why the driver's were not used."""
    if impl != "c":
        pytest.skip("the driver's events are the C timers'")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    t = Timings(schedule=300 * US, execute=200 * US, update=200 * US, gpu=2 * MS, kernels=2, launch=5 * US)
    eng, lines = _gpu_run(step_log, "main", 12, t, async_scheduling=True)
    assert _check_gpu_joined(lines, rel=0.03) >= 10
    hook = read_status(step_log)[0]["gpu_hook"]
    assert "torch.Event" in hook and want in hook, hook


@pytest.mark.parametrize("value,every", [
    (None, 16), ("", 16), (" 1/16 ", 16), ("1/4", 4), ("1/1", 1), ("all", 1), ("ON", 1), ("1", 1),
    ("0", 0), ("off", 0), ("false", 0)])
def test_gpu_time_setting(value, every):
    from mbench_vllm import gpu

    assert gpu.gpu_time_setting(value) == (every, "")


@pytest.mark.parametrize("value", ["2", "1/0", "1/x", "2/16", "1/2000000", "half", "-1"])
def test_gpu_time_setting_refused(step_log, value, monkeypatch):
    """A value MBENCH_GPU_TIME does not take: GPU time is not measured and
    the status line (written before the first step) names the value and
    what is accepted; the engine runs as without the GPU timer."""
    from mbench_vllm import gpu

    e, err = gpu.gpu_time_setting(value)
    assert e == 0 and repr(value) in err and "1/N" in err, err
    monkeypatch.setenv("MBENCH_GPU_TIME", value)
    t = Timings(schedule=100 * US, execute=100 * US, update=100 * US, gpu=200 * US, kernels=1, launch=2 * US)
    eng, lines = _gpu_run(step_log, "main", 6, t, async_scheduling=True)
    assert len(lines) == 6 and not any("gpu_us" in ln for ln in lines)
    st = read_status(step_log)
    assert st and st[0]["gpu_time"] == "not_measured" and repr(value) in st[0]["gpu_reason"], st


def test_c_gate_rate_over_seeds():
    """The C gate sends a random 1 in N calls to its hook, for any seed:
    200 seeds x 16,000 calls at N = 16 (and 40 seeds at N = 4 and 1), each
    count within 5 sd of 1,000 (binomial), the pooled rate within 1%; the
    others reach the method itself with their arguments; bad parameters are
    refused."""
    from mbench_vllm import _recorder

    fw = _recorder.NATIVE
    if fw is None:
        pytest.skip("the C timers did not load here")
    import os as _os

    for every, seeds in ((16, 200), (4, 40), (1, 5)):
        total = 0
        for _ in range(seeds):
            got = []
            t = fw.Timer(lambda self, x: x, _recorder.STATE, fw.K_GATE, hook=lambda self, x: got.append(x) or -x,
                         every=every, seed=int.from_bytes(_os.urandom(8), "little") | 1)
            out = [t(None, i) for i in range(1, 16001)]
            p = 1 / every
            sd = (16000 * p * (1 - p)) ** 0.5
            assert abs(len(got) - 16000 * p) <= 5 * sd + 0.5, (every, len(got))
            assert got == [i for i in range(1, 16001) if out[i - 1] == -i] and all(out[i - 1] in (i, -i) for i in range(1, 16001))
            total += len(got)
        assert total / (seeds * 16000) == pytest.approx(1 / every, rel=0.01), (every, total)
    for bad in ({"every": 0, "seed": 1}, {"every": 16, "seed": 0}, {"every": 16, "seed": 1, "hook": None}):
        kw = dict(hook=lambda *a: None)
        kw.update(bad)
        with pytest.raises(ValueError):
            fw.Timer(lambda *a: None, _recorder.STATE, fw.K_GATE, **kw)


@pytest.mark.parametrize("version", PINNED)
def test_gpu_time_turned_off(step_log, version, monkeypatch):
    """MBENCH_GPU_TIME=0 in the engine's environment: torch and a GPU are
    there, but no event is recorded, no line carries gpu_us, and the status
    line says GPU time was turned off."""
    monkeypatch.setenv("MBENCH_GPU_TIME", "0")
    t = Timings(schedule=300 * US, execute=200 * US, update=200 * US, gpu=1 * MS, kernels=2, launch=5 * US)
    eng, lines = _gpu_run(step_log, version, 8, t, async_scheduling=True)
    assert len(lines) == 8 and not any("gpu_us" in ln for ln in lines)
    st = read_status(step_log)
    assert st and st[0]["gpu_time"] == "not_measured" and "MBENCH_GPU_TIME=0" in st[0]["gpu_reason"]


@pytest.mark.parametrize("version", PINNED)
def test_gpu_not_measured_without_torch(step_log, version):
    """No torch in the engine process: no gpu_us anywhere, and the status
    line (written at engine start, before any step) says why."""
    ns = fake_vllm(VERSIONS[version], gpu=False)
    eng = engine(ns, config(Timings(schedule=100 * US), connector=None, async_scheduling=True))
    st = read_status(step_log)  # before the first step
    assert len(st) == 1 and st[0]["gpu_time"] == "not_measured"
    assert "torch is not importable" in st[0]["gpu_reason"]
    assert st[0]["path"] == "batch_queue" and st[0]["vllm"] == ns.version
    run_steps(eng, 6)
    shutdown(eng)
    flush()
    lines = read_lines(step_log)
    assert len(lines) == 6 and not any("gpu_us" in ln for ln in lines)
    assert not read_gpu_lines(step_log)
    assert all(s["gpu_time"] == "not_measured" for s in read_status(step_log))


def test_status_line_names_unhooked_scheduler(step_log):
    """A platform scheduler whose schedule cannot be wrapped (a staticmethod):
    the status line, written before the first step, names the hook and why;
    schedule_us/execute_us are absent from every line."""
    ns = fake_vllm(VERSIONS["main"])
    inner = ns.Scheduler.schedule
    holder = {}

    class Odd(ns.Scheduler):
        schedule = staticmethod(lambda *a: inner(holder["s"], *a))

    eng = engine(ns, config(Timings(schedule=300 * US, execute=100 * US), connector=None, scheduler_cls=Odd))
    holder["s"] = eng.scheduler
    st = read_status(step_log)
    assert len(st) == 1
    assert {"hook": "Odd.schedule", "reason": "not a patchable method"} in st[0]["incomplete"]
    run_steps(eng, 3)
    shutdown(eng)
    flush()
    lines = read_lines(step_log)
    assert len(lines) == 3
    for ln in lines:
        assert "schedule_us" not in ln and "execute_us" not in ln
        assert ln["unaccounted_us"] >= 300


@pytest.mark.parametrize("version", PINNED)
def test_platform_scheduler_created_after_plugin_load(step_log, version):
    """A platform plugin's scheduler subclass, defined after the plugin
    loaded and overriding schedule() without calling super(): its schedule
    time is schedule_us, not execute_us, on every line."""
    ns = fake_vllm(VERSIONS[version])
    ns.plugins.load_general_plugins()  # the plugin patches vLLM's Scheduler first
    from standins.common import make_scheduler_output, perf, spin

    class PlatformScheduler(ns.Scheduler):
        def schedule(self, *throttle):
            t = self.vllm_config.timings
            t0 = perf()
            spin(t.schedule)
            so = make_scheduler_output(self.vllm_config, self.steps)
            self.steps += 1
            t.note("schedule", perf() - t0)
            return so

    t = Timings(schedule=10 * MS, execute=1 * MS)
    eng = engine(ns, config(t, connector=None, scheduler_cls=PlatformScheduler))
    assert type(eng.scheduler) is PlatformScheduler
    t.truth.clear()
    run_steps(eng, 8)
    shutdown(eng)
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
    med_fwd = statistics.median(t.truth["execute"]) / 1000
    assert med_fwd <= med_exec < med_fwd + med_truth / 2


@pytest.mark.parametrize("version", PINNED)
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_scheduler_installed_after_engine_built(step_log, version, async_scheduling):
    """A platform's scheduler class, defined after load_general_plugins() and
    put into EngineCore.scheduler after the engine was built, overriding
    schedule() without calling super(): the step timer times whatever the
    engine's scheduler holds when a step runs. Every line after the switch
    carries schedule_us of at least the schedule() time the scheduler itself
    measured (so it is not counted in execute_us / launch_us), and the
    parts still add up to the step."""
    ns = fake_vllm(VERSIONS[version])
    ns.plugins.load_general_plugins()
    from standins.common import make_scheduler_output, perf, spin

    seen = []

    class PlatformScheduler(ns.Scheduler):
        def schedule(self, *throttle):
            t0 = perf()
            spin(self.vllm_config.timings.schedule)
            so = make_scheduler_output(self.vllm_config, self.steps)
            self.steps += 1
            seen.append(perf() - t0)
            return so

    t = Timings(schedule=1 * MS, execute=2 * MS)
    eng = engine(ns, config(t, connector=None, async_scheduling=async_scheduling))
    assert type(eng.scheduler) is ns.Scheduler
    run_steps(eng, 4)
    old = eng.scheduler
    eng.scheduler = PlatformScheduler(vllm_config=old.vllm_config, kv_cache_config="kvcfg",
                                      include_finished_set=False, log_stats=False)
    eng.scheduler.steps = old.steps
    run_steps(eng, 18)
    shutdown(eng)
    flush()
    lines = read_lines(step_log)
    assert len(lines) == 22
    after = lines[4:]
    assert len(seen) == 18
    for ln, own_ns in zip(after, seen):
        assert ln["schedule_us"] >= own_ns / 1000, ln
        parts = ("schedule_us", "launch_us", "wait_us", "update_us") if async_scheduling else \
            ("schedule_us", "execute_us", "update_us")
        assert ln["unaccounted_us"] == pytest.approx(
            ln["step_duration_us"] - sum(ln.get(k, 0.0) for k in parts), abs=0.002)
    assert all("schedule_us" in ln for ln in lines[:4])
    assert not read_status(step_log)[-1].get("incomplete")


@pytest.mark.parametrize("version", PINNED)
def test_deferred_sampling_is_launch_time(step_log, version):
    """Every 3rd batch waits for structured-output tokens: its sampling is
    launched after update_from_output, in the same call: in launch_us, and
    the identity holds; its GPU time still joins its batch."""
    t = Timings(schedule=200 * US, execute=300 * US, update=100 * US, gpu=2 * MS, kernels=4, gpu_vary=True)
    _, lines = _gpu_run(step_log, version, 30, t, async_scheduling=True, deferred_every=3)
    assert len(lines) == 30
    for ln in lines:
        parts = sum(ln.get(k, 0.0) for k in ("schedule_us", "launch_us", "wait_us", "update_us"))
        assert ln["unaccounted_us"] == pytest.approx(ln["step_duration_us"] - parts, abs=0.002)
        assert ln["launch_us"] >= 300  # the forward's CPU side, every call
    assert _check_gpu_joined(lines, rel=0.05) >= 20


@pytest.mark.parametrize("version", PINNED)
@pytest.mark.parametrize("hma_off", [True, False])
def test_noop_through_factory_hma(step_log, version, hma_off):
    ns = fake_vllm(VERSIONS[version])
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


def test_two_argument_connector_by_version(step_log):
    """0.18.1 builds a connector whose __init__ lacks kv_cache_config the old
    way (factory.py@8cb24d3a L77-L79, L124); main refuses it (@88ed6362
    L115-L123)."""
    import sys
    import types

    for version, ok in (("0.18", True), ("main", False)):
        ns = fake_vllm(VERSIONS[version])
        mod = types.ModuleType("twoarg_connector")

        class TwoArg(ns.SlowConnector):
            def __init__(self, vllm_config, role):
                ns.KVConnectorBase_V1.__init__(self, vllm_config, role, None)

        mod.TwoArg = TwoArg
        sys.modules["twoarg_connector"] = mod
        cfg = config(connector="TwoArg", module_path="twoarg_connector")
        if ok:
            c = ns.KVConnectorFactory.create_connector(config=cfg, role=ns.KVConnectorRole.WORKER)
            assert type(c) is TwoArg
        else:
            with pytest.raises(ValueError, match="2-argument"):
                ns.KVConnectorFactory.create_connector(config=cfg, role=ns.KVConnectorRole.WORKER,
                                                       kv_cache_config="kvcfg")
        del sys.modules["twoarg_connector"]


def test_multiproc_tp2_worker_files(step_log):
    """TP = 2 on main's multiproc executor with async scheduling: the engine
    process only sends (launch_us) and waits (wait_us), and each worker
    process writes its own get_finished file, one line per forward; GPU time
    is not measured (the model is in other processes) and the status says so."""
    import glob
    import os

    ns = fake_vllm(VERSIONS["main"])
    import mbench_vllm.noop as noop

    importlib.reload(noop)
    t = Timings(schedule=200 * US, execute=5 * MS)
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
        assert ln["batch_queue"] == 1 and "get_finished_us" not in ln and "gpu_us" not in ln
    # The step's time is split into the send and the wait for the workers
    # (their files below show where the forwards ran). How small the send
    # is, is the machine's: no bound on it here (test_overhead measures).
    for ln in lines[3:]:
        assert 0 < ln["launch_us"] and 0 < ln["wait_us"], ln
        assert ln["launch_us"] + ln["wait_us"] <= ln["step_duration_us"], ln
    st = read_status(step_log)
    assert st[0]["gpu_time"] == "not_measured" and "worker processes" in st[0]["gpu_reason"]
    base = step_log[: -len(".jsonl")]
    files = sorted(glob.glob(base + ".worker.*.jsonl"))
    assert len(files) == 2, files
    pids = {p.pid for p in eng.model_executor.procs}
    for f in files:
        wl = read_lines(f)
        assert {ln["pid"] for ln in wl} <= pids
        assert len(wl) == 12, (f, len(wl))
        assert os.path.basename(f).startswith("engine_step.worker.")


def test_v2_model_runner_says_how_to_measure(step_log):
    """vLLM 0.26.0 runs dense models on the V2 model runner by default
    (config/vllm.py@ffd46bfab _is_default_v2_model_runner_model: any non-MoE
    generate model; the H200 run's log: "Using V2 Model Runner" for a Llama),
    which has no _model_forward: GPU time is not measured, and the status
    line names the switch that selects the V1 runner."""
    fake_vllm(VERSIONS["main"], gpu=True)
    from mbench_vllm.gpu import GPU

    class ModelRunnerV2:  # vllm/v1/worker/gpu/model_runner.py: the model is called in execute_model
        def execute_model(self, scheduler_output):
            return None

    GPU.install_runner(ModelRunnerV2())
    st = GPU.status()
    assert st["gpu_time"] == "not_measured"
    assert "ModelRunnerV2 has no _model_forward" in st["gpu_reason"]
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in st["gpu_reason"]

