"""``python -m mbench_vllm.check`` against the stand-ins (tests/standins/*.py)
and without vLLM."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from mbench_vllm import check
from standins import VERSIONS, fake_vllm

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("cwd", ["tmp", "repo_root"])
def test_without_vllm_exits_1(tmp_path, cwd):
    """Also from the mbench repo root, whose vllm/ directory is no vLLM."""
    env = dict(os.environ, PYTHONPATH=PKG)
    r = subprocess.run([sys.executable, "-m", "mbench_vllm.check"], env=env,
                       cwd=str(tmp_path) if cwd == "tmp" else os.path.dirname(PKG),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout
    assert "vLLM: cannot import" in r.stdout


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_all_hooks_ok(step_log, version):
    fake_vllm(VERSIONS[version])
    out = io.StringIO()
    rc = check.report(out)
    text = out.getvalue()
    assert f"vLLM {VERSIONS[version].VERSION}" in text
    for name in ("EngineCore.step", "EngineCore.step_with_batch_queue", "Scheduler.schedule",
                 "build_meta", "Scheduler.update_from_output", "get_finished", "execute"):
        assert f"  {name}" in text
    assert "missing" not in text
    assert "mbench_steps: OK" in text or "entry point vllm.general_plugins:mbench_steps: OK" in text
    assert rc == 0, text
    if version == "main":
        assert "Scheduler._build_kv_connector_meta" in text
    # Which path each timer covers, and the async-scheduling default.
    assert "async scheduling default" in text
    if version in ("0.18", "main"):
        # 0.18.1's default is a pydantic FieldInfo(default=None), main's a plain None.
        assert "async scheduling default: None -> auto" in text, text
        assert "gpu_us: OK (CUDA events around GPUModelRunner._model_forward" in text
    for timer in ("launch_us", "wait_us", "execute_us", "batch_queue", "gpu_us"):
        assert timer in text
    assert "GPU-bound" not in text and "duration is the GPU time" not in text


@pytest.mark.parametrize("value,words", [
    (None, "a random 1 in 16 forwards timed here"), ("1/4", "a random 1 in 4 forwards timed here"),
    ("all", "every forward timed here"), ("0", "GPU timing off here (MBENCH_GPU_TIME=0)"),
    ("1/x", "MBENCH_GPU_TIME here: MBENCH_GPU_TIME='1/x' is not understood")])
def test_check_says_which_forwards_are_timed(step_log, monkeypatch, value, words):
    """check's gpu_us line says what MBENCH_GPU_TIME in this environment
    (the engine's, when check runs where the engine will) times, and the
    default."""
    if value is None:
        monkeypatch.delenv("MBENCH_GPU_TIME", raising=False)
    else:
        monkeypatch.setenv("MBENCH_GPU_TIME", value)
    fake_vllm(VERSIONS["main"])
    line = check.gpu_timer_line()
    assert line.startswith("gpu_us: OK") and words in line and "the default 1/16" in line, line


@pytest.mark.parametrize("kind", ["dataclass", "fieldinfo", "pydantic_fields", "true", "false", "absent"])
def test_async_default_dataclass_and_pydantic(kind):
    """The async-scheduling default read from a stdlib dataclass, from a
    pydantic dataclass whose stdlib field holds a FieldInfo (vLLM 0.18.1,
    config/scheduler.py@682566b1 L138), and from __pydantic_fields__."""
    import dataclasses
    import sys
    import types

    class FieldInfo:  # pydantic.fields.FieldInfo, as far as check.py reads it
        def __init__(self, default):
            self.default = default

    if kind == "dataclass":
        cfg = dataclasses.make_dataclass("SchedulerConfig", [("async_scheduling", "bool | None", None)])
    elif kind == "fieldinfo":
        cfg = dataclasses.make_dataclass(
            "SchedulerConfig", [("async_scheduling", "bool | None", dataclasses.field(default=FieldInfo(None)))])
    elif kind == "pydantic_fields":
        cfg = type("SchedulerConfig", (), {"__pydantic_fields__": {"async_scheduling": FieldInfo(None)}})
    elif kind in ("true", "false"):
        cfg = dataclasses.make_dataclass(
            "SchedulerConfig", [("async_scheduling", "bool", dataclasses.field(default=FieldInfo(kind == "true")))])
    else:
        cfg = dataclasses.make_dataclass("SchedulerConfig", [("other", "int", 0)])
    saved = {k: sys.modules.get(k) for k in ("vllm", "vllm.config")}
    try:
        sys.modules["vllm"] = types.ModuleType("vllm")
        sys.modules["vllm.config"] = m = types.ModuleType("vllm.config")
        m.SchedulerConfig = cfg
        line = check.async_scheduling_line()
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    want = {"dataclass": "None -> auto", "fieldinfo": "None -> auto", "pydantic_fields": "None -> auto",
            "true": "True -> ON by default", "false": "False -> off by default", "absent": "has no such option"}
    assert want[kind] in line, line


def test_missing_and_filtered(step_log, monkeypatch):
    fake_vllm(VERSIONS["0.10"], omit=("vllm.distributed.kv_transfer.kv_connector.factory",))
    monkeypatch.setenv("VLLM_PLUGINS", "some_other_plugin")
    out = io.StringIO()
    rc = check.report(out)
    text = out.getvalue()
    assert rc == 2
    assert "get_finished" in text and "missing: import vllm.distributed" in text
    assert "FILTERED OUT" in text


def test_summarize_log(tmp_path):
    log = tmp_path / "engine_step.jsonl"
    log.write_text(
        '{"ts_us":10,"step_duration_us":100.0,"schedule_us":20.0,"unaccounted_us":80.0,"pid":7}\n'
        '{"ts_us":20,"step_duration_us":300.0,"schedule_us":40.0,"unaccounted_us":260.0,"pid":7}\n'
        "not json\n"
    )
    (tmp_path / "engine_step.worker.9.jsonl").write_text('{"ts_us":15,"get_finished_us":3.0,"pid":9}\n')
    out = io.StringIO()
    assert check.summarize(str(log), out) == 0
    text = out.getvalue()
    assert "2 steps, 1 malformed, pids [7]" in text
    assert "path step() (every timer = the step's one batch): 2 steps" in text and "path batch" not in text
    assert "build_meta_us     absent in every line" in text
    assert "p50      200.0" in text
    assert "GPU time: not measured: no gpu_us and no status line saying why" in text
    assert "engine_step.worker.9.jsonl: 1 get_finished lines" in text
    assert check.summarize(str(tmp_path / "nope.jsonl"), io.StringIO()) == 3


def test_summarize_log_status_and_gpu(tmp_path):
    """Status lines and GPU lines are not steps: the summary says whether
    GPU time was measured and which hooks are missing."""
    log = tmp_path / "engine_step.jsonl"
    log.write_text(
        '{"ts_us":5,"status":"engine","pid":7,"vllm":"0.18.1","path":"batch_queue","gpu_time":"measured",'
        '"gpu_hook":"CUDA events around GPUModelRunner._model_forward (in the engine process)",'
        '"incomplete":[{"hook":"wait_us","reason":"cannot wrap X.result"}]}\n'
        '{"ts_us":10,"step_duration_us":100.0,"launch_us":20.0,"wait_us":3.0,"update_us":5.0,'
        '"unaccounted_us":72.0,"gpu_us":61.5,"batch":1,"batch_queue":1,"pid":7}\n'
        '{"ts_us":12,"gpu_us":62.5,"gpu_batch":2,"pid":7}\n'
    )
    out = io.StringIO()
    assert check.summarize(str(log), out) == 0
    text = out.getvalue()
    assert "1 steps, 0 malformed" in text and "path batch queue" in text
    assert "gpu_us            in       2 lines" in text
    assert "GPU time: measured (CUDA events around GPUModelRunner._model_forward" in text
    assert "decomposition incomplete: wait_us: cannot wrap X.result (pid 7)" in text


def test_summarize_reads_binary_records_and_counts_damage(step_log, tmp_path):
    """--log reads the plugin's binary step log; a damaged record is counted
    malformed and the records after it are read."""
    import io

    from helpers import config, engine, fake_vllm, flush, run_steps
    from mbench_vllm import check
    from standins import VERSIONS

    eng = engine(fake_vllm(VERSIONS["main"]), config(async_scheduling=True))
    run_steps(eng, 6)
    flush()
    data = open(step_log, "rb").read()
    cut = data.index(b"\xffS")
    bad = tmp_path / "damaged.steplog"
    bad.write_bytes(data[:cut] + b"\xffQ\x01\x00\x08\x00\x00\x00" + data[cut:])
    out = io.StringIO()
    assert check.summarize(step_log, out) == 0
    assert "6 steps, 0 malformed" in out.getvalue(), out.getvalue()
    out = io.StringIO()
    assert check.summarize(str(bad), out) == 0
    assert "6 steps, 1 malformed" in out.getvalue(), out.getvalue()
