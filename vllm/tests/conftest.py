"""Test setup: the package and its source-tree dist-info on sys.path, a clean
plugin state and a clean fake ``vllm`` per test."""

from __future__ import annotations

import os
import sys

import pytest

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
for p in (PKG_DIR, TESTS_DIR):
    if p not in sys.path:
        sys.path.insert(0, p)


@pytest.fixture
def step_log(tmp_path, monkeypatch):
    """MBENCH_STEP_LOG in tmp_path; plugin and fake vllm reset around the test."""
    from mbench_vllm import plugin

    path = str(tmp_path / "engine_step.jsonl")
    monkeypatch.setenv("MBENCH_STEP_LOG", path)
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    plugin._reset_for_tests()
    yield path
    plugin._reset_for_tests()
    for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
        del sys.modules[k]
    sys.modules.update(saved)
    from standins import fakegpu

    fakegpu.uninstall()
