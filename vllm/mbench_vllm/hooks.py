"""Hook points in vLLM, their discovery, and the timing wrappers.

Hook points (name -> what it times -> field):

* ``EngineCore.step`` / ``EngineCore.step_with_batch_queue`` -> one line per
  call -> ``step_duration_us``; lines of the second carry ``batch_queue: 1``.
* ``Scheduler.schedule`` -> ``schedule_us``. Patched on vLLM's class at
  plugin load and again, per engine instance at its first step, on the class
  of the scheduler object the engine actually uses (a platform subclass
  created after the plugin loaded included).
* ``Scheduler._build_kv_connector_meta`` (where vLLM has it) and the
  scheduler-role connector's ``build_connector_meta`` (instance wrapped when
  ``KVConnectorFactory.create_connector`` builds it) -> ``build_meta_us``.
  Both share one re-entrancy guard, so the outermost call is timed once.
* ``Scheduler.update_from_output`` -> ``update_us``; on the step() path its
  start also ends ``execute_us`` (from the end of ``schedule()`` in the same
  call, or from the step's start when that call scheduled nothing).
* the engine's executor instance: ``execute_model`` / ``sample_tokens`` ->
  ``launch_us``, and the ``result()`` of every future they return ->
  ``wait_us`` (both written on batch-queue lines only, where they replace
  ``execute_us``).
* the worker-role connector's ``get_finished`` (and ``get_transfer_results``
  should a connector define it), instance wrapped at
  ``KVConnectorFactory.create_connector`` -> ``get_finished_us``. The
  model-runner mixin calls ``get_kv_transfer_group().get_finished(...)``
  (kv_connector_model_runner_mixin.py@23ec7c7f L131), i.e. this very
  instance, so subclass overrides (Mooncake, NIXL, ...) are timed, which
  wrapping ``KVConnectorBase_V1.get_finished`` would miss.

Nothing here imports vLLM at module import time.
"""

from __future__ import annotations

import importlib
import types
from dataclasses import dataclass, field
from typing import Any

from ._recorder import STATE, _perf_ns

MARK = "__mbench_wrapped__"

# Module paths of the hook points (stable across 0.10 … main).
MOD_CORE = "vllm.v1.engine.core"
MOD_SCHED = "vllm.v1.core.sched.scheduler"
MOD_FACTORY = "vllm.distributed.kv_transfer.kv_connector.factory"

HOOK_NAMES = (
    "EngineCore.step",
    "EngineCore.step_with_batch_queue",
    "Scheduler.schedule",
    "build_meta",
    "Scheduler.update_from_output",
    "get_finished",
)


@dataclass
class Targets:
    """What was found in the running vLLM (classes may be None)."""

    version: str = "unknown"
    engine_core: Any = None
    scheduler: Any = None
    factory: Any = None
    errors: dict[str, str] = field(default_factory=dict)

    def status(self) -> dict[str, str]:
        """Hook name → "OK" or "missing: <why>"."""
        ec, sc, fa = self.engine_core, self.scheduler, self.factory
        st: dict[str, str] = {}

        def has(cls, name, mod):
            if cls is None:
                return f"missing: {self.errors.get(mod, 'class not found')}"
            return "OK" if callable(getattr(cls, name, None)) else f"missing: no {name}"

        st["EngineCore.step"] = has(ec, "step", MOD_CORE)
        st["EngineCore.step_with_batch_queue"] = has(ec, "step_with_batch_queue", MOD_CORE)
        st["Scheduler.schedule"] = has(sc, "schedule", MOD_SCHED)
        st["Scheduler.update_from_output"] = has(sc, "update_from_output", MOD_SCHED)
        meta_sched = sc is not None and callable(getattr(sc, "_build_kv_connector_meta", None))
        fac_ok = fa is not None and callable(getattr(fa, "create_connector", None))
        if meta_sched and fac_ok:
            st["build_meta"] = "OK (Scheduler._build_kv_connector_meta + connector.build_connector_meta)"
        elif meta_sched:
            st["build_meta"] = "OK (Scheduler._build_kv_connector_meta)"
        elif fac_ok:
            st["build_meta"] = "OK (connector.build_connector_meta via KVConnectorFactory)"
        else:
            st["build_meta"] = f"missing: {self.errors.get(MOD_FACTORY, 'no KVConnectorFactory.create_connector')}"
        st["get_finished"] = (
            "OK (worker connector.get_finished via KVConnectorFactory)"
            if fac_ok
            else f"missing: {self.errors.get(MOD_FACTORY, 'no KVConnectorFactory.create_connector')}"
        )
        return st


def vllm_version() -> str:
    try:
        import vllm  # noqa: F401

        v = getattr(vllm, "__version__", None)
        if v:
            return str(v)
    except Exception:
        pass
    try:
        from importlib.metadata import version

        return version("vllm")
    except Exception:
        return "unknown"


def discover() -> Targets:
    """Import the hook-point classes of the installed vLLM (no patching)."""
    t = Targets(version=vllm_version())
    for mod, attr, slot in (
        (MOD_CORE, "EngineCore", "engine_core"),
        (MOD_SCHED, "Scheduler", "scheduler"),
        (MOD_FACTORY, "KVConnectorFactory", "factory"),
    ):
        try:
            m = importlib.import_module(mod)
            cls = getattr(m, attr, None)
            if cls is None:
                t.errors[mod] = f"{mod} has no {attr}"
            setattr(t, slot, cls)
        except Exception as exc:  # ImportError or anything the import raised
            t.errors[mod] = f"import {mod}: {type(exc).__name__}: {exc}"
    return t


# ---------------------------------------------------------------- wrappers


def _is_wrapped(f) -> bool:
    return getattr(f, MARK, False)


def _mark(f, orig):
    setattr(f, MARK, True)
    f.__wrapped__ = orig
    f.__name__ = getattr(orig, "__name__", f.__name__)
    f.__qualname__ = getattr(orig, "__qualname__", f.__qualname__)
    f.__doc__ = getattr(orig, "__doc__", None)
    return f


def wrap_step(orig, batch_queue: bool = False):
    """One engine step: a call of step() or step_with_batch_queue()."""
    if _is_wrapped(orig):
        return orig
    st = STATE
    perf = _perf_ns

    def step(self, *args, **kwargs):
        if st.in_step:
            return orig(self, *args, **kwargs)
        if self.__dict__.get(READY) is None:
            # First step of this engine instance: hook the scheduler and
            # executor objects it actually uses (a platform scheduler class
            # is only known now), whatever process this is.
            st.core_process = True
            try:
                _after_engine_init(self)
            except Exception as exc:
                _report_unhookable(self, {"engine": f"set-up failed: {exc!r}"})
        st.in_step = True
        st.batch_queue = batch_queue
        st.t_sched_end = 0
        st.sched_ns = st.meta_ns = st.exec_ns = st.upd_ns = st.sched_out = None
        st.launch_ns = st.wait_ns = None
        t0 = st.t_step = perf()
        try:
            res = orig(self, *args, **kwargs)
        finally:
            t1 = perf()
            st.in_step = False
        st.emit(self, t0, t1)
        return res

    return _mark(step, orig)


def _step_wrapper(name: str):
    """wrap_step for EngineCore.<name>, with its path."""
    bq = name == "step_with_batch_queue"
    return lambda orig: wrap_step(orig, bq)


def wrap_launch(orig):
    """Executor execute_model / sample_tokens, bound to one executor.

    Times the call (``launch_us``: with the inline UniProcExecutor it runs
    the model runner's CPU side, kernel launches included; with the
    multiproc executor it only sends the request) and wraps the returned
    future's ``result`` so the engine thread's wait for the batch is timed
    (``wait_us``)."""
    if _is_wrapped(orig):
        return orig
    st = STATE
    perf = _perf_ns

    def launch(*args, **kwargs):
        if st.in_launch or not st.in_step:
            return orig(*args, **kwargs)
        st.in_launch = True
        t0 = perf()
        try:
            out = orig(*args, **kwargs)
        finally:
            d = perf() - t0
            v = st.launch_ns
            st.launch_ns = d if v is None else v + d
            st.in_launch = False
        res = getattr(out, "result", None)
        if res is not None and callable(res) and not _is_wrapped(res):
            try:
                out.result = _timed_result(res)
            except Exception:
                pass  # a read-only future: its wait stays in unaccounted_us
        return out

    return _mark(launch, orig)


def _timed_result(res):
    st = STATE
    perf = _perf_ns

    def result(*args, **kwargs):
        if not st.in_step or st.in_wait:
            return res(*args, **kwargs)
        st.in_wait = True
        t0 = perf()
        try:
            return res(*args, **kwargs)
        finally:
            d = perf() - t0
            v = st.wait_ns
            st.wait_ns = d if v is None else v + d
            st.in_wait = False

    return _mark(result, res)


def wrap_schedule(orig):
    if _is_wrapped(orig):
        return orig
    st = STATE
    perf = _perf_ns

    def schedule(self, *args, **kwargs):
        if st.in_sched or not st.in_step:
            return orig(self, *args, **kwargs)
        st.in_sched = True
        t0 = perf()
        try:
            out = orig(self, *args, **kwargs)
        finally:
            t1 = perf()
            st.in_sched = False
            v = st.sched_ns
            st.sched_ns = t1 - t0 if v is None else v + t1 - t0
            st.t_sched_end = t1
        st.sched_out = out
        return out

    return _mark(schedule, orig)


def wrap_meta(orig):
    """build_connector_meta or Scheduler._build_kv_connector_meta."""
    if _is_wrapped(orig):
        return orig
    st = STATE
    perf = _perf_ns

    def build_meta(*args, **kwargs):
        if st.in_meta or not st.in_step:
            return orig(*args, **kwargs)
        st.in_meta = True
        t0 = perf()
        try:
            return orig(*args, **kwargs)
        finally:
            d = perf() - t0
            v = st.meta_ns
            st.meta_ns = d if v is None else v + d
            st.in_meta = False

    return _mark(build_meta, orig)


def wrap_update(orig):
    if _is_wrapped(orig):
        return orig
    st = STATE
    perf = _perf_ns

    def update_from_output(self, *args, **kwargs):
        if st.in_update or not st.in_step:
            return orig(self, *args, **kwargs)
        st.in_update = True
        t0 = perf()
        if st.has_execute:
            d = t0 - (st.t_sched_end or st.t_step)
            v = st.exec_ns
            st.exec_ns = d if v is None else v + d
        try:
            return orig(self, *args, **kwargs)
        finally:
            d = perf() - t0
            v = st.upd_ns
            st.upd_ns = d if v is None else v + d
            st.in_update = False

    return _mark(update_from_output, orig)


def wrap_get_finished(orig):
    """Worker-side finished-transfer poll (get_finished / get_transfer_results)."""
    if _is_wrapped(orig):
        return orig
    st = STATE
    perf = _perf_ns

    def get_finished(*args, **kwargs):
        if st.in_gf:
            return orig(*args, **kwargs)
        st.in_gf = True
        t0 = perf()
        try:
            return orig(*args, **kwargs)
        finally:
            t1 = perf()
            st.in_gf = False
            st.record_get_finished(t1 - t0, t1)

    return _mark(get_finished, orig)


def _patch_method(cls, name: str, wrapper) -> bool:
    """Wrap cls.name in place (only where cls defines it). True if hooked."""
    f = cls.__dict__.get(name)
    if f is None:
        return callable(getattr(cls, name, None)) and _is_wrapped(getattr(cls, name))
    if isinstance(f, (staticmethod, classmethod)):
        return False
    if not _is_wrapped(f):
        setattr(cls, name, wrapper(f))
    return True


def _patch_resolved(cls, name: str, wrapper) -> bool:
    """Wrap the method as cls resolves it (defining it on cls if inherited)."""
    f = getattr(cls, name, None)
    if f is None or not callable(f):
        return False
    if name in cls.__dict__:
        return _patch_method(cls, name, wrapper)
    if not _is_wrapped(f):
        setattr(cls, name, wrapper(f))
    return True


def _role_name(conn, args, kwargs) -> str:
    role = getattr(conn, "_role", None)
    if role is None:
        role = kwargs.get("role", args[1] if len(args) > 1 else None)
    return str(getattr(role, "name", role) or "").upper()


def instrument_connector(conn, role: str) -> None:
    """Wrap the timed methods of one connector instance (idempotent)."""
    if "WORKER" in role:
        names, wrapper = ("get_finished", "get_transfer_results"), wrap_get_finished
    elif "SCHEDULER" in role:
        names, wrapper = ("build_connector_meta",), wrap_meta
    else:
        return
    for name in names:
        bound = getattr(conn, name, None)
        if bound is None or _is_wrapped(getattr(bound, "__func__", bound)):
            continue
        try:
            setattr(conn, name, wrapper(bound))
        except Exception:
            # __slots__ or a read-only attribute: wrap on the concrete class.
            _patch_resolved(type(conn), name, wrapper)


def wrap_create_connector(factory_cls) -> bool:
    raw = factory_cls.__dict__.get("create_connector")
    if raw is None:
        return False
    func = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
    if _is_wrapped(func):
        return True
    is_cm = isinstance(raw, classmethod)

    def create_connector(*args, **kwargs):
        conn = func(*args, **kwargs)
        try:
            rest = args[1:] if is_cm else args
            instrument_connector(conn, _role_name(conn, rest, kwargs))
        except Exception:
            pass
        return conn

    _mark(create_connector, func)
    if is_cm:
        setattr(factory_cls, "create_connector", classmethod(create_connector))
    elif isinstance(raw, staticmethod):
        setattr(factory_cls, "create_connector", staticmethod(create_connector))
    else:
        setattr(factory_cls, "create_connector", create_connector)
    return True


READY = "_mbench_hooked"


def _after_engine_init(self) -> None:
    """Per EngineCore instance: hook the objects this engine uses.

    The scheduler class comes from ``scheduler_config.get_scheduler_cls()``
    and is instantiated in ``EngineCore.__init__`` after
    ``load_general_plugins()`` (core.py@ac3cb2e2 L94, L125, L140), so a
    platform scheduler subclass is only known here. A hook that cannot be
    applied is reported (warning) and its field is absent from every line.
    """
    self.__dict__[READY] = True
    st = STATE
    cls = type(self)
    for name in ("step", "step_with_batch_queue"):
        if callable(getattr(cls, name, None)):
            _patch_resolved(cls, name, _step_wrapper(name))
    problems: dict[str, str] = {}
    sched = getattr(self, "scheduler", None)
    if sched is None:
        problems["Scheduler"] = "engine has no scheduler attribute"
        st.has_schedule = st.has_update = False
    else:
        scls = type(sched)
        for name, wrapper, flag in (
            ("schedule", wrap_schedule, "has_schedule"),
            ("update_from_output", wrap_update, "has_update"),
        ):
            ok = False
            try:
                ok = _patch_resolved(scls, name, wrapper)
            except Exception as exc:
                problems[f"{scls.__name__}.{name}"] = repr(exc)
            if not ok:
                problems.setdefault(f"{scls.__name__}.{name}", "not a patchable method")
            setattr(st, flag, ok)
        if callable(getattr(scls, "_build_kv_connector_meta", None)):
            try:
                st.has_meta = _patch_resolved(scls, "_build_kv_connector_meta", wrap_meta) or st.has_meta
            except Exception as exc:
                problems[f"{scls.__name__}._build_kv_connector_meta"] = repr(exc)
        conn = getattr(sched, "connector", None)
        if conn is not None and st.has_meta:
            instrument_connector(conn, "SCHEDULER")
    st.has_execute = st.has_schedule and st.has_update
    ex = getattr(self, "model_executor", None)
    st.has_launch = False
    if ex is not None:
        ok = True
        for name in ("execute_model", "sample_tokens"):
            bound = getattr(ex, name, None)
            if bound is None or not callable(bound):
                if name == "execute_model":  # sample_tokens is 0.11+ only
                    ok = False
                    problems[f"executor.{name}"] = f"{type(ex).__name__} has no {name}"
                continue
            if not _is_wrapped(getattr(bound, "__func__", bound)):
                try:
                    setattr(ex, name, wrap_launch(bound))
                except Exception as exc:
                    ok = False
                    problems[f"executor.{name}"] = repr(exc)
        st.has_launch = ok
    else:
        problems["executor"] = "engine has no model_executor attribute"
    fn = getattr(self, "step_fn", None)
    func = getattr(fn, "__func__", None)
    if func is not None and not _is_wrapped(func) and getattr(fn, "__self__", None) is self:
        self.step_fn = types.MethodType(_step_wrapper(func.__name__)(func), self)
    if problems:
        _report_unhookable(self, problems)


def _report_unhookable(engine, problems: dict[str, str]) -> None:
    import logging

    STATE.unhooked.update(problems)
    logging.getLogger("vllm.mbench_vllm").warning(
        "mbench_vllm: cannot hook %s in engine %s; those timers are absent from "
        "every line and the step decomposition is incomplete",
        "; ".join(f"{k} ({v})" for k, v in problems.items()),
        type(engine).__name__,
    )


def wrap_engine_init(orig):
    if _is_wrapped(orig):
        return orig

    def __init__(self, *args, **kwargs):
        STATE.core_process = True
        orig(self, *args, **kwargs)
        try:
            _after_engine_init(self)
        except Exception:
            pass

    return _mark(__init__, orig)


def _engine_under_construction(ec):
    """The EngineCore whose __init__ is on the stack (vLLM loads plugins there)."""
    import sys

    f = sys._getframe(1)
    for _ in range(64):
        if f is None:
            return None
        if f.f_code.co_name == "__init__":
            obj = f.f_locals.get("self")
            if obj is not None and isinstance(obj, ec):
                return obj
        f = f.f_back
    return None


def install(t: Targets) -> dict[str, str]:
    """Patch every hook point found in t. Returns the status of each hook."""
    status = t.status()
    ec, sc, fa = t.engine_core, t.scheduler, t.factory
    if ec is not None:
        for name in ("step", "step_with_batch_queue"):
            if status[f"EngineCore.{name}"] == "OK":
                _patch_resolved(ec, name, _step_wrapper(name))
        if "__init__" in ec.__dict__:
            ec.__init__ = wrap_engine_init(ec.__dict__["__init__"])
        try:
            eng = _engine_under_construction(ec)
        except Exception:
            eng = None
        if eng is not None:
            # Called from EngineCore.__init__ (load_general_plugins), before it
            # creates executor, scheduler and step_fn: this is the core process.
            STATE.core_process = True
            for name in ("step", "step_with_batch_queue"):
                if callable(getattr(type(eng), name, None)):
                    _patch_resolved(type(eng), name, _step_wrapper(name))
    if sc is not None:
        if status["Scheduler.schedule"] == "OK":
            STATE.has_schedule = _patch_resolved(sc, "schedule", wrap_schedule)
        if status["Scheduler.update_from_output"] == "OK":
            STATE.has_update = _patch_resolved(sc, "update_from_output", wrap_update)
        if callable(getattr(sc, "_build_kv_connector_meta", None)):
            STATE.has_meta = _patch_resolved(sc, "_build_kv_connector_meta", wrap_meta)
    if fa is not None and callable(getattr(fa, "create_connector", None)):
        if wrap_create_connector(fa):
            STATE.has_meta = True
            STATE.has_get_finished = True
    STATE.has_execute = STATE.has_schedule and STATE.has_update
    status["execute"] = (
        "OK (derived: end of schedule() to start of update_from_output())"
        if STATE.has_execute
        else "missing: needs both Scheduler.schedule and Scheduler.update_from_output"
    )
    return status
