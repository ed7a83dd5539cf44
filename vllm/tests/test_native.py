"""The C timers (mbench_vllm/_fastwrap.c, built by mbench_vllm/native.py)
and the fallback to the Python wrappers.

Every behavioural test of this suite runs on both implementations (the
step_log fixture's ``impl``); these tests check what is particular to the
choice: which one the status line names, that the C path runs no Python
per step, that a missing compiler or missing headers fall back with the
reason said, that a process without the C module (MBENCH_VLLM_NATIVE=0, or
nothing to build with) writes the same log, and that the source builds
against the other CPython versions found on this machine. Stand-ins:
tests/standins/main.py and v0_18.py (sources cited there).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pytest

from helpers import US, Timings, config, engine, fake_vllm, flush, read_lines, read_status, run_steps, shutdown
from standins import VERSIONS

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)


def test_status_line_names_the_timers(step_log, impl):
    eng = engine(fake_vllm(VERSIONS["main"]), config(async_scheduling=True))
    run_steps(eng, 3)
    shutdown(eng)
    flush()
    st = read_status(step_log)[-1]
    assert st["timers"] == impl
    assert st["timers_detail"].startswith("C wrappers: mbench_vllm._fastwrap" if impl == "c" else "Python wrappers")


def _plugin_calls_per_step(eng, n: int) -> float:
    """Python frames of mbench_vllm's own code entered per engine step."""
    import mbench_vllm

    pkg = os.path.dirname(mbench_vllm.__file__)
    calls = 0

    def prof(frame, event, arg):
        nonlocal calls
        # Plugin frames entered from vLLM's code; not the once-a-second
        # check that the flusher is alive (State._poke), which a slow
        # machine may reach within the run.
        if event == "call" and frame.f_code.co_filename.startswith(pkg) and frame.f_code.co_name != "_poke" \
                and not (frame.f_back and frame.f_back.f_code.co_filename.startswith(pkg)):
            calls += 1

    sys.setprofile(prof)
    try:
        run_steps(eng, n)
    finally:
        sys.setprofile(None)
    return calls / n


@pytest.mark.parametrize("version", ["0.18", "main"])
def test_c_path_runs_no_python_per_step(step_log, impl, version):
    """The guard of the overhead target that no loaded machine can blur: on
    the C path a step enters no Python frame of the plugin (all eleven
    wrapped calls of vLLM's batch-queue step are C); the Python path enters
    one per wrapped call."""
    from mbench_vllm._recorder import STATE

    eng = engine(fake_vllm(VERSIONS[version]), config(async_scheduling=True, decode=256))
    run_steps(eng, 20)
    STATE.flush_all()  # the flusher is woken at 64 queued records: stay below
    per_step = _plugin_calls_per_step(eng, 40)
    shutdown(eng)
    if impl == "c":
        assert per_step == 0, per_step
    else:
        assert per_step >= 5, per_step  # step, schedule, meta, launch x2, result, update, ...


def test_build_fallback_reasons(tmp_path):
    from mbench_vllm import native

    out = str(tmp_path / "x.so")
    why = native.build(native.SOURCE, out, include=str(tmp_path))
    assert why.startswith("no Python headers (") and "Python.h" in why and "python3-dev" in why
    if not os.path.exists(os.path.join(native.python_include(), "Python.h")):
        pytest.skip("no Python headers here")
    other = tmp_path / "inc"  # headers of another Python: refused, never built against
    other.mkdir()
    (other / "Python.h").write_text("")
    (other / "patchlevel.h").write_text("#define PY_MAJOR_VERSION 3\n#define PY_MINOR_VERSION 2\n")
    why = native.build(native.SOURCE, out, include=str(other))
    assert why == f"the headers in {other} are of Python 3.2, this is {sys.version_info[0]}.{sys.version_info[1]}"
    why = native.build(native.SOURCE, out, cc=str(tmp_path / "no-such-cc"))
    assert why.startswith("no C compiler ("), why
    if native.compiler() is None:
        pytest.skip("no C compiler here")
    bad = tmp_path / "bad.c"
    bad.write_text("#include <Python.h>\nthis is not C;\n")
    why = native.build(str(bad), out)
    assert why.startswith("compiling failed (") and "exit" in why, why
    assert not os.path.exists(out) and not glob.glob(str(tmp_path / ".build-*"))  # no half-written build
    assert native.build(native.SOURCE, out) is None and os.path.getsize(out) > 0


SCRIPT = r"""
import os, sys
sys.path[:0] = [{pkg!r}, {here!r}]
from helpers import config, engine, flush, read_lines, read_status, run_steps, shutdown
from standins import VERSIONS, fake_vllm
from mbench_vllm import _recorder
eng = engine(fake_vllm(VERSIONS["main"]), config(async_scheduling=True, decode=64))
run_steps(eng, 30)
shutdown(eng)
flush()
st = read_status(os.environ["MBENCH_STEP_LOG"])[-1]
lines = read_lines(os.environ["MBENCH_STEP_LOG"])
keys = sorted(set().union(*lines))
print(st["timers"], "|", st["timers_detail"], "|", _recorder.State.__mro__[1].__name__, "|", len(lines), "|",
      ",".join(keys), "|", sum(1 for d in lines if "wait_us" in d and "launch_us" in d and d.get("batch")))
"""


def _run_script(tmp_path, python: str = sys.executable, **env) -> list[str]:
    e = dict(os.environ, MBENCH_STEP_LOG=str(tmp_path / "engine_step.jsonl"), **env)
    r = subprocess.run([python, "-c", SCRIPT.format(pkg=PKG, here=HERE)], env=e, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    return [x.strip() for x in r.stdout.strip().splitlines()[-1].split("|")]


def test_process_without_the_c_module_writes_the_same_log(tmp_path):
    """MBENCH_VLLM_NATIVE=0: State and StepLog are plain Python classes;
    automatic fallback: no compiler and nothing cached (a fresh cache) —
    the plugin still builds at activation, fails, and says why. Both logs
    carry the same fields as the C path's."""
    off = _run_script(tmp_path / "off", MBENCH_VLLM_NATIVE="0")
    assert off[:3] == ["python", "Python wrappers: MBENCH_VLLM_NATIVE=0", "object"]
    auto = _run_script(tmp_path / "auto", MBENCH_VLLM_NATIVE="", MBENCH_VLLM_CACHE=str(tmp_path / "cache"),
                       CC=str(tmp_path / "no-such-cc"), PATH=str(tmp_path))
    assert auto[0] == "python" and auto[1].startswith("Python wrappers: no C compiler ("), auto
    assert auto[2] == "object"
    for got in (off, auto):
        assert got[3] == "30" and int(got[5]) >= 25, got
    from mbench_vllm import _recorder

    if _recorder.NATIVE is None:
        pytest.skip("no C timers here to compare with")
    on = _run_script(tmp_path / "on")  # the suite's cache (conftest): built once
    assert on[:3] == ["c", on[1], "Core"] and on[1].startswith("C wrappers: mbench_vllm._fastwrap (cached: ")
    assert on[3:] == off[3:] == auto[3:], (on, off)


def test_headers_from_elsewhere(tmp_path):
    """MBENCH_VLLM_PYINCLUDE: a host without python3-dev builds with headers
    of its Python's major.minor copied from elsewhere (the H200 run carries
    them); the status line names them."""
    from mbench_vllm import native

    inc = native.python_include()
    if not os.path.exists(os.path.join(inc, "Python.h")) or native.compiler() is None:
        pytest.skip("nothing to build with here")
    copy = tmp_path / "include"
    shutil.copytree(inc, copy)
    got = _run_script(tmp_path, MBENCH_VLLM_NATIVE="1", MBENCH_VLLM_CACHE=str(tmp_path / "cache"),
                      MBENCH_VLLM_PYINCLUDE=str(copy))
    assert got[0] == "c" and f"with the headers in {copy}" in got[1], got
    assert got[3] == "30", got


def _other_pythons() -> list[str]:
    """CPython 3.10+ interpreters (vLLM needs 3.10) here other than this one (PATH, pyenv)."""
    found = {}
    cands = [shutil.which(f"python3.{m}") for m in range(10, 15)]
    cands += glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3"))
    for c in cands:
        if not c or not os.access(c, os.X_OK):
            continue
        try:
            v = subprocess.run([c, "-c", "import sys; print(sys.version_info[:2] >= (3, 10), sys.version.split()[0])"],
                               capture_output=True, text=True, timeout=30).stdout.split()
        except (OSError, subprocess.SubprocessError):
            continue
        if v and v[0] == "True" and v[1] != sys.version.split()[0]:
            found.setdefault(v[1], c)
    return sorted(found.values())


@pytest.mark.parametrize("python", _other_pythons() or [None])
def test_builds_against_other_pythons(tmp_path, python):
    """The GPU machine runs Python 3.12: the source must build and run
    there too; every other CPython found here is tried (skipped where its
    headers are missing: then the fallback says so)."""
    if python is None:
        pytest.skip("no other CPython here")
    got = _run_script(tmp_path, python, MBENCH_VLLM_NATIVE="1", MBENCH_VLLM_CACHE=str(tmp_path / "cache"))
    if got[0] == "python":
        assert "no Python headers" in got[1] or "no C compiler" in got[1], got
        pytest.skip(f"{python}: {got[1]}")
    assert got[0] == "c" and "built in" in got[1] and got[2] == "Core", got
    assert got[3] == "30" and int(got[5]) >= 25, got


def test_timer_is_a_method_like_a_function(step_log, impl):
    """What vLLM and the hooks rely on of a wrapped method: binding,
    introspection (inspect follows __wrapped__), the wrapped mark, copying."""
    import copy
    import inspect

    ns = fake_vllm(VERSIONS["main"])
    eng = engine(ns, config(async_scheduling=True))
    f = ns.Scheduler.__dict__["schedule"]
    assert f.__mbench_wrapped__ and f.__name__ == "schedule" and f.__qualname__.endswith("Scheduler.schedule")
    assert list(inspect.signature(eng.scheduler.schedule).parameters) == ["throttle_prefills"]
    assert eng.scheduler.schedule.__self__ is eng.scheduler
    assert copy.deepcopy(f) is f or impl == "python"
    eng.scheduler.schedule()  # outside a step: passes through, times nothing
    run_steps(eng, 2)
    shutdown(eng)
