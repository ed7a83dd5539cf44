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
    if version == "main":
        assert "async scheduling default: None -> auto" in text
    for timer in ("launch_us", "wait_us", "execute_us", "batch_queue"):
        assert timer in text


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
    assert "0 batch-queue lines" in text
    assert "build_meta_us     absent in every line" in text
    assert "p50      200.0" in text
    assert "engine_step.worker.9.jsonl: 1 get_finished lines" in text
    assert check.summarize(str(tmp_path / "nope.jsonl"), io.StringIO()) == 3
