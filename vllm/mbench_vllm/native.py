"""The C hot path of the step timer (``_fastwrap.c``): built where a C
compiler and Python's headers exist, cached, loaded; else the Python
wrappers, and the reason.

``load()`` runs once, when ``_recorder`` is imported (the classes of the
hook state derive from the C types when they load). It

* loads a build of this very source for this interpreter from the cache
  (``$MBENCH_VLLM_CACHE``, else ``$XDG_CACHE_HOME/mbench_vllm`` or
  ``~/.cache/mbench_vllm``) when there is one;
* else compiles it — ``cc -O2 -shared -fPIC -I<Python include>`` (the
  interpreter's, or ``$MBENCH_VLLM_PYINCLUDE``: headers of the same
  major.minor, checked) into a
  temporary file renamed into place, under a lock, so processes starting
  together build once — when the plugin is active in this process
  (``MBENCH_STEP_LOG`` set) or ``MBENCH_VLLM_NATIVE=1`` (``python -m
  mbench_vllm.check`` sets it: the build happens when mbench installs the
  plugin on a host, before any engine starts);
* checks the module (its ABI number, the step-record layout against
  ``steplog``, its clock against ``time.perf_counter_ns``).

``MBENCH_VLLM_NATIVE=0`` keeps the Python wrappers. Whichever path is
active is written into the engine's status line (``timers``,
``timers_detail``) and printed by ``check``. Nothing here raises: every
failure is a reason.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

from . import steplog

ABI = 3
ENV_NATIVE = "MBENCH_VLLM_NATIVE"
ENV_CACHE = "MBENCH_VLLM_CACHE"
MODULE = "mbench_vllm._fastwrap"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_fastwrap.c")
HEADERS = tuple(os.path.join(os.path.dirname(SOURCE), h)
                for h in ("_fastwrap_state.h", "_fastwrap_events.h"))  # included by SOURCE
BUILD_TIMEOUT_S = 120

# What load() decided, for the status line and check.
module = None
detail = "not loaded yet"


def layout() -> tuple:
    """The step-record layout the C module must have (steplog's slots)."""
    s = steplog
    return (s.STEP_SLOTS, s.S_TS, s.S_DUR, s.S_SCHED, s.S_META, s.S_EXEC, s.S_UPD, s.S_GF, s.S_LAUNCH,
            s.S_WAIT, s.S_GPU, s.S_BATCH, s.S_RUN, s.S_WAITING, s.S_TOTAL, s.S_DEC, s.S_FLAGS, s.S_PID)


def cache_dir() -> str:
    d = os.environ.get(ENV_CACHE)
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mbench_vllm")


def built_path(src: bytes, directory: str | None = None) -> str:
    """The cached build of ``src`` for this interpreter."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    h = hashlib.sha256(src + sys.version.encode() + suffix.encode()).hexdigest()[:16]
    return os.path.join(directory or cache_dir(), f"_fastwrap-{h}{suffix}")


ENV_INCLUDE = "MBENCH_VLLM_PYINCLUDE"


def python_include() -> str:
    """Where Python.h is: $MBENCH_VLLM_PYINCLUDE (headers of this Python's
    major.minor copied from elsewhere, for a host without python3-dev),
    else this interpreter's include directory."""
    if os.environ.get(ENV_INCLUDE):
        return os.environ[ENV_INCLUDE]
    paths = sysconfig.get_paths()
    return paths.get("include") or paths.get("platinclude") or ""


def headers_version(include: str) -> tuple[int, int] | None:
    """(major, minor) of the headers in include (patchlevel.h), or None."""
    try:
        with open(os.path.join(include, "patchlevel.h"), encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    import re

    mj = re.search(r"#define\s+PY_MAJOR_VERSION\s+(\d+)", text)
    mn = re.search(r"#define\s+PY_MINOR_VERSION\s+(\d+)", text)
    return (int(mj.group(1)), int(mn.group(1))) if mj and mn else None


def compiler() -> str | None:
    """The C compiler: $CC, Python's configured CC, cc or gcc on PATH."""
    for cand in (os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc", "gcc"):
        if not cand:
            continue
        exe = cand.split()[0]
        found = shutil.which(exe)
        if found:
            return found
    return None


def build(src_path: str, out: str, cc: str | None = None, include: str | None = None) -> str | None:
    """Compile src_path into out. None when done, else why not."""
    include = python_include() if include is None else include
    if not os.path.exists(os.path.join(include, "Python.h")):
        return (f"no Python headers ({os.path.join(include, 'Python.h')} not found; "
                f"e.g. apt-get install python3-dev)")
    hv = headers_version(include)
    if hv != sys.version_info[:2]:
        return (f"the headers in {include} are of Python {'.'.join(map(str, hv)) if hv else '(unknown)'}, "
                f"this is {sys.version_info[0]}.{sys.version_info[1]}")
    cc = compiler() if cc is None else cc
    if not cc or not shutil.which(cc):
        return f"no C compiler ({cc or 'CC, cc, gcc'} not found on PATH)"
    d = os.path.dirname(out)
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=d)
        os.close(fd)
    except OSError as exc:
        return f"cannot write the build to {d}: {exc}"
    cmd = [cc, "-O2", "-shared", "-fPIC", "-fno-strict-aliasing", "-I", include, src_path, "-o", tmp]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if p.returncode != 0:
            err = (p.stderr or p.stdout).strip().splitlines()
            return f"compiling failed ({' '.join(cmd[:1])} exit {p.returncode}): {' | '.join(err[:3])}"
        os.replace(tmp, out)
        tmp = ""
    except (OSError, subprocess.SubprocessError) as exc:
        return f"compiling failed: {exc!r}"
    finally:
        if tmp and os.path.exists(tmp):
            os.remove(tmp)
    return None


def _import(path: str):
    from importlib.machinery import ExtensionFileLoader
    from importlib.util import module_from_spec, spec_from_file_location

    loader = ExtensionFileLoader(MODULE, path)
    spec = spec_from_file_location(MODULE, path, loader=loader)
    mod = module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def check_module(mod) -> str | None:
    """None when mod is a usable build, else why not."""
    if getattr(mod, "ABI", None) != ABI:
        return f"ABI {getattr(mod, 'ABI', None)} != {ABI}"
    if tuple(getattr(mod, "LAYOUT", ())) != layout():
        return f"step-record layout {getattr(mod, 'LAYOUT', None)} != steplog's {layout()}"
    a = time.perf_counter_ns()
    b = mod.now()
    c = time.perf_counter_ns()
    if not a <= b <= c:
        return f"its clock is not time.perf_counter_ns's ({a} <= {b} <= {c} fails)"
    return None


def _owned_safely(path: str) -> bool:
    """A cached build is loaded only from a directory of ours that others cannot write."""
    try:
        st = os.stat(os.path.dirname(path))
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def load(want_build: bool | None = None):
    """Load (building if allowed) the C module; sets ``module`` and ``detail``.
    Returns the module or None."""
    global module, detail
    setting = os.environ.get(ENV_NATIVE, "").strip().lower()
    if setting in ("0", "off", "no", "false"):
        module, detail = None, f"{ENV_NATIVE}={setting}"
        return None
    if want_build is None:
        want_build = setting in ("1", "on", "yes", "true") or bool(os.environ.get("MBENCH_STEP_LOG"))
    t0 = time.monotonic()
    try:
        src = b""
        for path in (SOURCE, *HEADERS):
            with open(path, "rb") as f:
                src += f.read()
    except OSError as exc:
        module, detail = None, f"no C source ({exc})"
        return None
    out = built_path(src)
    how = "cached"
    if not os.path.exists(out):
        if not want_build:
            module, detail = None, "not built (the plugin is inactive in this process)"
            return None
        why = _locked_build(out)
        if why is not None:
            module, detail = None, why
            return None
        how = f"built in {time.monotonic() - t0:.1f} s"
        if os.environ.get(ENV_INCLUDE):
            how += f" with the headers in {os.environ[ENV_INCLUDE]}"
    if not _owned_safely(out):
        module, detail = None, f"{os.path.dirname(out)} is not a private directory of this user: not loaded"
        return None
    try:
        mod = _import(out)
    except Exception as exc:  # ImportError, a bad build
        module, detail = None, f"cannot load {out}: {exc!r}"
        return None
    why = check_module(mod)
    if why is not None:
        module, detail = None, f"{out} unusable: {why}"
        return None
    sys.modules[MODULE] = mod
    module, detail = mod, f"{MODULE} ({how}: {out})"
    return mod


def _locked_build(out: str) -> str | None:
    d = os.path.dirname(out)
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        lock = open(os.path.join(d, ".lock"), "a")
    except OSError as exc:
        return f"cannot write the build to {d}: {exc}"
    try:
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(out):  # another process built it meanwhile
            return None
        return build(SOURCE, out)
    except Exception as exc:  # noqa: BLE001 - never break start-up over the fast path
        return f"building failed: {exc!r}"
    finally:
        lock.close()


def status() -> dict:
    """The timers part of the engine's status line."""
    return {"timers": "c" if module is not None else "python",
            "timers_detail": detail if module is not None else f"Python wrappers: {detail}"}
