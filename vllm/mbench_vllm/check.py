"""``python -m mbench_vllm.check``: which step hooks this vLLM offers.

``python -m mbench_vllm.check --log PATH`` instead summarizes a step log
(fields present, p50/p90/p99 per timer, worker files next to it); it needs
no vLLM.

Imports vLLM's modules (no engine, no GPU work), prints the vLLM version,
each hook point as OK or missing, and whether vLLM will load the plugin
(entry point visible, ``VLLM_PLUGINS`` filter, ``MBENCH_STEP_LOG``).

Exit status: 0 when vLLM imports and every hook point is OK, 1 when vLLM
cannot be imported, 2 when some hook point is missing or the plugin would
not load.
"""

from __future__ import annotations

import os
import sys

from . import __version__, hooks

GROUP = "vllm.general_plugins"
PLUGIN = "mbench_steps"


def _entry_point_visible() -> str:
    try:
        from importlib.metadata import entry_points

        eps = [ep for ep in entry_points(group=GROUP) if ep.name == PLUGIN]
    except Exception as exc:  # pragma: no cover - very old Pythons
        return f"unknown ({exc!r})"
    if not eps:
        return "NOT FOUND (pip install the package, or put its directory on PYTHONPATH)"
    return "OK (" + ", ".join(sorted({ep.value for ep in eps})) + ")"


def report(out=sys.stdout) -> int:
    """Print the report; return the exit status."""
    w = out.write
    w(f"mbench_vllm {__version__}\n")
    w(timers_line())  # before vLLM's import: the build happens at install even without vLLM here
    try:
        import vllm  # noqa: F401
    except Exception as exc:
        w(f"vLLM: cannot import ({type(exc).__name__}: {exc})\n")
        return 1
    if getattr(vllm, "__file__", None) is None and not hasattr(vllm, "__version__"):
        # e.g. run from the mbench repo root: its vllm/ directory is a namespace package
        w(f"vLLM: cannot import (found only a directory named vllm: {list(vllm.__path__)})\n")
        return 1
    t = hooks.discover()
    w(f"vLLM {t.version} ({os.path.dirname(getattr(vllm, '__file__', None) or '') or '?'})\n")
    status = t.status()
    ok = True
    width = max(len(k) for k in status)
    for name, st in status.items():
        ok &= st.startswith("OK")
        w(f"  {name:<{width}}  {st}\n")
    derived = status["Scheduler.schedule"].startswith("OK") and status[
        "Scheduler.update_from_output"
    ].startswith("OK")
    w(f"  {'execute':<{width}}  {'OK (derived)' if derived else 'missing'}\n")
    w(f"  {'executor.execute_model, sample_tokens':<{width}}  per engine instance, at its first step (launch_us, wait_us)\n")
    w(f"  {'scheduler in use':<{width}}  per engine instance, at its first step (a platform scheduler class included)\n")
    w(async_scheduling_line())
    w(gpu_timer_line())
    w(TIMER_PATHS)
    ep = _entry_point_visible()
    w(f"entry point {GROUP}:{PLUGIN}: {ep}\n")
    plugins = os.environ.get("VLLM_PLUGINS")
    if plugins is None:
        w("VLLM_PLUGINS: unset (all plugins load, mbench_steps included)\n")
        loads = True
    else:
        loads = PLUGIN in plugins.split(",")
        w(f"VLLM_PLUGINS={plugins!r}: mbench_steps {'loads' if loads else 'is FILTERED OUT'}\n")
    log = os.environ.get("MBENCH_STEP_LOG")
    w(f"MBENCH_STEP_LOG: {log if log else 'unset (the plugin stays inactive)'}\n")
    if not ok:
        w("missing hook points: their fields will be ABSENT from engine_step.jsonl\n")
    return 0 if ok and loads and ep.startswith("OK") else 2


TIMER_PATHS = """which path each timer covers (a line with "batch_queue":1 ran the batch queue):
  EngineCore.step (no async scheduling, no PP): every timer is of the step's one batch
    schedule_us   Scheduler.schedule()
    execute_us    end of schedule() to start of update_from_output(): launch,
                  grammar bitmask, the wait on future.result() and sample_tokens
    update_us     update_from_output()
  EngineCore.step_with_batch_queue (async scheduling, PP):
    schedule_us   schedule() of the NEW batch (token counts describe it)
    launch_us     executor execute_model + sample_tokens calls of this call
                  (inline executor: the CPU side of the forward; deferred
                  sampling after the update included)
    wait_us       the engine thread blocked on an EARLIER batch's result: NOT
                  its GPU time (a CPU-bound step waits little while the GPU works)
    update_us     update_from_output() of that EARLIER batch
    (no execute_us on this path)
  both: gpu_us   GPU time of the line's batch ("batch"; the collected one): CUDA
                 events around GPUModelRunner._model_forward, one GPU (the
                 in-process executor) only; absent = not measured, never
                 inferred from wait_us or the step duration. With
                 gpu_host_bound: 1 the GPU had reached the start event before
                 the host finished launching the forward: the span holds host
                 time, an upper bound, and is left out of GPU time
        build_meta_us inside schedule_us; get_finished_us: in-process workers
        (one GPU) inside execute_us / launch_us, other processes in worker files
"""


def _field_default(cls, name: str):
    """(found, default) of a config field: a stdlib dataclass field, or a
    pydantic one (vLLM's @config makes pydantic dataclasses, whose stdlib
    field default may be a FieldInfo holding the real default)."""
    import dataclasses

    pyd = getattr(cls, "__pydantic_fields__", None)
    if isinstance(pyd, dict) and name in pyd:
        return True, _unwrap_default(pyd[name])
    try:
        fields = {f.name: f for f in dataclasses.fields(cls)}
    except TypeError:
        fields = {}
    f = fields.get(name)
    if f is None:
        if hasattr(cls, name):
            return True, _unwrap_default(getattr(cls, name))
        return False, None
    if f.default is not dataclasses.MISSING:
        return True, _unwrap_default(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return True, f.default_factory()
    return True, None


def _unwrap_default(d):
    """A pydantic FieldInfo's default (or its factory's value); d otherwise."""
    if type(d).__name__ == "FieldInfo" and hasattr(d, "default"):
        v = d.default
        if type(v).__name__ == "PydanticUndefinedType":
            factory = getattr(d, "default_factory", None)
            return factory() if callable(factory) else None
        return v
    return d


def async_scheduling_line() -> str:
    """Whether this vLLM schedules asynchronously by default."""
    try:
        from vllm.config import SchedulerConfig  # type: ignore

        found, d = _field_default(SchedulerConfig, "async_scheduling")
        if not found:
            return "async scheduling: this vLLM has no such option (step() path only)\n"
        if d is None:
            what = ("auto: vLLM turns it on at start-up unless something is incompatible "
                    "(config/vllm.py), so expect the batch-queue path")
        elif d is True:
            what = "ON by default: the batch-queue path (launch_us, wait_us)"
        elif d is False:
            what = "off by default (--async-scheduling turns it on): the step() path"
        else:
            return (f"async scheduling default: unknown ({d!r}); "
                    "the log's batch_queue field says which path ran\n")
        return f"async scheduling default: {d!r} -> {what}; the log's batch_queue field says which path ran\n"
    except Exception as exc:
        return (f"async scheduling default: unknown ({type(exc).__name__}); "
                "the log's batch_queue field says which path ran\n")


def gpu_timer_line() -> str:
    """Whether this vLLM's model runner has the hook point of gpu_us."""
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # type: ignore
    except Exception as exc:
        return f"gpu_us: GPUModelRunner not importable ({type(exc).__name__}: {exc}): GPU time not measured\n"
    if callable(getattr(GPUModelRunner, "_model_forward", None)):
        from .gpu import DEFAULT_EVERY, ENV_GPU_TIME, gpu_time_setting

        every, err = gpu_time_setting(os.environ.get(ENV_GPU_TIME))
        share = (f"{ENV_GPU_TIME} here: {err}" if err else "GPU timing off here (" + ENV_GPU_TIME + "=0)" if every == 0
                 else "every forward timed here" if every == 1 else f"a random 1 in {every} forwards timed here")
        return ("gpu_us: OK (CUDA events around GPUModelRunner._model_forward; one GPU, the in-process "
                f"executor; the V2 model runner and TP/PP > 1 are not measured; {share}; the default "
                f"1/{DEFAULT_EVERY}, set {ENV_GPU_TIME}=1/N, all or 0 in the engine's environment)\n")
    return "gpu_us: missing: GPUModelRunner has no _model_forward: GPU time not measured\n"


def timers_line() -> str:
    """Which timer implementation engines here will use: builds the C one
    (native.py) now, so engine processes load it from the cache at start."""
    from . import native

    mod = native.module or native.load(want_build=True)
    if mod is not None:
        return f"timers: C ({native.detail}); the status line says timers=c\n"
    return (f"timers: Python wrappers ({native.detail}): correct, but several us more per step "
            "on the engine thread; the status line says timers=python\n")


TIMERS = ("step_duration_us", "schedule_us", "build_meta_us", "execute_us", "launch_us",
          "wait_us", "update_us", "get_finished_us", "unaccounted_us", "gpu_us")


def _pct(xs: list, q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(path: str, out=sys.stdout) -> int:
    """Print a step log's summary per path, whether GPU time was measured,
    and the hooks its engines could not apply; 0 if it has steps, 3 if none."""
    import glob

    from . import steplog

    w = out.write
    steps, status, gpu_lines, errors = [], {}, [], []
    try:
        records = steplog.read(path, errors)  # binary step records and JSON lines
    except OSError as exc:
        w(f"{path}: {exc}\n")
        return 3
    bad = len(errors)
    for d in records:
        if not isinstance(d, dict):
            bad += 1
        elif d.get("status") == "engine":
            status[d.get("pid")] = d
        elif "step_duration_us" in d:
            steps.append(d)
        elif "gpu_us" in d:
            gpu_lines.append(d)
        else:
            bad += 1
    pids = sorted({ln.get("pid") for ln in steps})
    w(f"{path}: {len(steps)} steps, {bad} malformed, pids {pids}\n")
    for name, sel in (("batch queue (wait/update/gpu = the collected batch)", lambda d: d.get("batch_queue") == 1),
                      ("step() (every timer = the step's one batch)", lambda d: d.get("batch_queue") != 1)):
        lines = [d for d in steps if sel(d)]
        if not lines:
            continue
        w(f"  path {name}: {len(lines)} steps\n")
        for k in TIMERS:
            xs = [ln[k] for ln in lines if k in ln and not (k == "gpu_us" and ln.get("gpu_host_bound"))]
            if k == "gpu_us" and name.startswith("batch"):
                xs += [g["gpu_us"] for g in gpu_lines if not g.get("gpu_host_bound")]
            if not xs:
                w(f"    {k:<17} absent in every line\n")
                continue
            w(f"    {k:<17} in {len(xs):>7} lines  p50 {_pct(xs, .5):10.1f}  "
              f"p90 {_pct(xs, .9):10.1f}  p99 {_pct(xs, .99):10.1f} us\n")
    timed = [d for d in steps if "gpu_us" in d] + gpu_lines
    host = [d["gpu_us"] for d in timed if d.get("gpu_host_bound")]
    n_measured = len(timed) - len(host)
    spans = (f"the GPU reached the forward's start event before the host had launched it, so the "
             f"span of the events (p50 {_pct(host, .5):.1f} us) holds host time: an upper bound, "
             "not GPU time") if host else ""
    if n_measured:
        hooks = sorted({s.get("gpu_hook", "") for s in status.values() if s.get("gpu_hook")})
        w(f"  GPU time: measured ({'; '.join(hooks) or 'CUDA events'})"
          + (f" for {n_measured} of {len(timed)} batches; {len(host)} host-bound, left out: {spans}" if host else "")
          + "\n")
    elif host:
        w(f"  GPU time: not measured: every GPU-timed batch was host-bound ({len(host)}): {spans}\n")
    else:
        why = sorted({s.get("gpu_reason", "") for s in status.values() if s.get("gpu_reason")})
        w("  GPU time: not measured: " + ("; ".join(why) or "no gpu_us and no status line saying why") + "\n")
    for s_ in status.values():
        if s_.get("timers"):
            w(f"  timers (pid {s_.get('pid')}): {s_.get('timers_detail') or s_['timers']}\n")
    for s_ in status.values():
        for p in s_.get("incomplete", []):
            w(f"  decomposition incomplete: {p.get('hook')}: {p.get('reason')} (pid {s_.get('pid')})\n")
    base = path[:-6] if path.endswith(".jsonl") else path
    for wf in sorted(glob.glob(base + ".worker.*.jsonl")):
        with open(wf, encoding="utf-8") as f:
            n = sum(1 for raw in f if raw.strip())
        w(f"  worker file {wf}: {n} get_finished lines\n")
    return 0 if steps else 3


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--log"] and len(args) == 2:
        sys.exit(summarize(args[1]))
    if args:
        sys.stderr.write("usage: python -m mbench_vllm.check [--log STEP_LOG]\n")
        sys.exit(64)
    sys.exit(report())


if __name__ == "__main__":
    main()
