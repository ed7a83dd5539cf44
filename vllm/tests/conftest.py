"""Test setup: the package and its source-tree dist-info on sys.path, a clean
plugin state and a clean fake ``vllm`` per test."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

# Before mbench_vllm is imported: build the C timers (_fastwrap.c) from
# source into a fresh cache, so every run proves the build, and test both
# implementations (the step_log fixture's params).
os.environ.setdefault("MBENCH_VLLM_NATIVE", "1")
os.environ.setdefault("MBENCH_VLLM_CACHE", tempfile.mkdtemp(prefix="mbench_vllm_cache_"))

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
for p in (PKG_DIR, TESTS_DIR):
    if p not in sys.path:
        sys.path.insert(0, p)


def use_impl(impl: str) -> None:
    """Wrap with the C timers ("c") or the Python wrappers ("python") from
    now on; skips "c" where the C module did not build (a failure where
    MBENCH_REQUIRE_NATIVE=1, as in CI)."""
    from mbench_vllm import _recorder, native

    if impl == "c" and _recorder.NATIVE is None:
        if os.environ.get("MBENCH_REQUIRE_NATIVE") == "1":
            pytest.fail(f"the C timers are required (MBENCH_REQUIRE_NATIVE=1) but did not load: {native.detail}")
        pytest.skip(f"no C timers here: {native.detail}")
    _recorder.FAST = _recorder.NATIVE if impl == "c" else None


@pytest.fixture(params=["c", "python"])
def impl(request):
    """The timer implementation a test runs on (both, in turn)."""
    use_impl(request.param)
    yield request.param
    from mbench_vllm import _recorder

    _recorder.FAST = _recorder.NATIVE


@pytest.fixture(scope="session")
def fake_libcuda(tmp_path_factory):
    """tests/fakecuda/fake_libcuda.c built (cc) and loaded: the fake CUDA
    driver the C timers' events run on here; None without a compiler."""
    import ctypes
    import shutil
    import subprocess

    cc = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc")
    if cc is None:
        return None
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakecuda", "fake_libcuda.c")
    out = str(tmp_path_factory.mktemp("fakecuda") / "libcuda_fake.so")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", src, "-o", out], check=True, timeout=120)
    return out, ctypes.CDLL(out)


@pytest.fixture
def step_log(impl, tmp_path, monkeypatch, fake_libcuda):
    """MBENCH_STEP_LOG in tmp_path, MBENCH_GPU_TIME=all; plugin and fake
    vllm reset around the test; run once per timer implementation."""
    from mbench_vllm import plugin

    path = str(tmp_path / "engine_step.jsonl")
    monkeypatch.setenv("MBENCH_STEP_LOG", path)
    # Every forward GPU-timed: the tests join each batch to its truth (the
    # sampling gate's own tests set MBENCH_GPU_TIME themselves).
    monkeypatch.setenv("MBENCH_GPU_TIME", "all")
    # With the C timers the GPU timer's events are the fake CUDA driver's
    # (the C Events); with the Python wrappers, the fake torch's Events.
    from standins import fakegpu

    if impl == "c" and fake_libcuda is not None:
        monkeypatch.setenv("MBENCH_LIBCUDA", fake_libcuda[0])
        fakegpu.attach_driver(fake_libcuda[1])
    else:
        if impl == "c" and os.environ.get("MBENCH_REQUIRE_NATIVE") == "1":
            pytest.fail("no C compiler for the fake CUDA driver (MBENCH_REQUIRE_NATIVE=1)")
        fakegpu.attach_driver(None)
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    plugin._reset_for_tests()
    yield path
    plugin._reset_for_tests()
    for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
        del sys.modules[k]
    sys.modules.update(saved)
    fakegpu.uninstall()
    fakegpu.attach_driver(None)
