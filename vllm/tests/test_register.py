"""register(): activation, idempotence, missing hook points, entry point.

Stand-ins: tests/standins/v0_10.py, v0_18.py, main.py (sources cited there);
``vllm.plugins`` follows vllm/plugins/__init__.py at
vllm-project/vllm@b36adfa349cfab0e79f3d736d5e5413bd3ee19f5 (in 0.18.1; docs/citations.md).
"""

from __future__ import annotations

import logging
import os

import pytest

from helpers import MS, US, Timings, config, engine, fake_vllm, flush, read_lines, run_steps, shutdown
from mbench_vllm import plugin
from standins import VERSIONS


def test_inactive_without_env(step_log, monkeypatch):
    monkeypatch.delenv("MBENCH_STEP_LOG")
    ns = fake_vllm(VERSIONS["0.18"])
    before = ns.EngineCore.__dict__["step"]
    plugin.register()
    assert ns.EngineCore.__dict__["step"] is before
    assert plugin.status() is None
    eng = engine(ns, config(connector=None))  # loads plugins: still nothing
    run_steps(eng, 2)
    shutdown(eng)
    assert ns.EngineCore.__dict__["step"] is before
    assert not os.path.exists(step_log)


def test_entry_point_visible_from_source_tree():
    """The source tree's dist-info makes PYTHONPATH=<dir> enough for vLLM."""
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert eps.get("mbench_steps") == "mbench_vllm.plugin:register"


def test_version_consistent():
    import mbench_vllm

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(here, "pyproject.toml"), encoding="utf-8") as f:
        assert f'version = "{mbench_vllm.__version__}"' in f.read()
    assert os.path.isdir(os.path.join(here, f"mbench_vllm-{mbench_vllm.__version__}.dist-info"))


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_loaded_by_engine_and_idempotent(step_log, version, caplog):
    """vLLM loads the plugin from EngineCore.__init__; later calls change nothing."""
    ns = fake_vllm(VERSIONS[version])
    caplog.set_level(logging.INFO, logger="vllm.mbench_vllm")
    eng = engine(ns, config(Timings(schedule=100 * US)))
    st = plugin.status()
    assert st is not None and all(v.startswith("OK") for v in st.values()), st
    step = ns.EngineCore.__dict__.get("step") or ns.EngineCore.step
    plugin.register()
    plugin.register()
    ns.plugins.plugins_loaded = False
    ns.plugins.load_general_plugins()
    assert (ns.EngineCore.__dict__.get("step") or ns.EngineCore.step) is step
    assert not getattr(step.__wrapped__, "__mbench_wrapped__", False)  # wrapped once
    sched = ns.Scheduler.__dict__["schedule"]
    assert not getattr(sched.__wrapped__, "__mbench_wrapped__", False)
    run_steps(eng, 4)
    shutdown(eng)
    flush()
    assert len(read_lines(step_log)) == 4  # one line per step, not two
    msgs = [r.getMessage() for r in caplog.records if r.name == "vllm.mbench_vllm"]
    assert len(msgs) == 1 and "all step hooks installed" in msgs[0], msgs


def test_missing_factory_hooks(step_log, caplog):
    """vLLM without KVConnectorFactory (0.10 line has no
    Scheduler._build_kv_connector_meta either): build_meta and get_finished
    are reported once, with the version, and absent from every line."""
    ns = fake_vllm(VERSIONS["0.10"], omit=("vllm.distributed.kv_transfer.kv_connector.factory",))
    caplog.set_level(logging.WARNING, logger="vllm.mbench_vllm")
    t = Timings(schedule=200 * US, build_meta=300 * US, execute=500 * US, get_finished=100 * US)
    eng = engine(ns, config(t))
    plugin.register()
    run_steps(eng, 5)
    shutdown(eng)
    flush()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "0.10.2" in warnings[0] and "build_meta" in warnings[0] and "get_finished" in warnings[0]
    lines = read_lines(step_log)
    assert len(lines) == 5
    for ln in lines:
        assert "build_meta_us" not in ln and "get_finished_us" not in ln
        assert ln["schedule_us"] >= 500  # meta still runs inside schedule
        assert ln["unaccounted_us"] == pytest.approx(
            ln["step_duration_us"] - ln["schedule_us"] - ln["execute_us"] - ln["update_us"], abs=0.002)


def test_missing_scheduler_module(step_log, caplog):
    """Without the scheduler module at start-up the warning says so, and the
    scheduler object the engine actually uses is still hooked at its first
    step (per engine instance): the decomposition is complete."""
    ns = fake_vllm(VERSIONS["0.18"], omit=("vllm.v1.core.sched.scheduler",))
    caplog.set_level(logging.WARNING, logger="vllm.mbench_vllm")
    eng = engine(ns, config(Timings(execute=300 * US), connector=None))
    run_steps(eng, 3)
    shutdown(eng)
    flush()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "Scheduler.schedule" in warnings[0], warnings
    for ln in read_lines(step_log):
        for k in ("schedule_us", "execute_us", "update_us"):
            assert k in ln
        assert ln["execute_us"] >= 300


def test_missing_engine_core(step_log, caplog):
    """No EngineCore at all: a warning, no lines, no crash."""
    ns = fake_vllm(VERSIONS["0.18"], omit=("vllm.v1.engine.core",))
    caplog.set_level(logging.WARNING, logger="vllm.mbench_vllm")
    plugin.register()
    eng = engine(ns, config(connector=None))
    run_steps(eng, 2)
    shutdown(eng)
    flush()
    assert read_lines(step_log) == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "EngineCore.step" in warnings[0]


def test_broken_hook_target_does_not_crash(step_log, caplog):
    """Whatever install() meets, register() returns and vLLM keeps working."""
    ns = fake_vllm(VERSIONS["0.18"])
    import vllm.v1.engine.core as core

    class Weird:
        __slots__ = ()
        step = 42  # not callable

    core.EngineCore = Weird
    caplog.set_level(logging.WARNING, logger="vllm.mbench_vllm")
    plugin.register()
    eng = engine(ns, config(connector=None))
    run_steps(eng, 1)
    shutdown(eng)
    assert any("EngineCore.step" in r.getMessage() for r in caplog.records)
