"""Per-engine set-up: hook the objects an EngineCore uses, before it reports
ready, and write its status line.

vLLM loads the general plugins first thing in ``EngineCore.__init__``
(core.py@7afe0faa L99, @6adad087 L118), before it builds the executor
(L112 / L133), takes the scheduler class from
``scheduler_config.get_scheduler_cls()`` (L126 / L148) and instantiates it
(L141 / L161). The last thing ``__init__`` sets up that the step uses is
``self.step_fn`` (L208 / L232). ``EngineCoreProc.__init__`` runs
``EngineCore.__init__`` inside its start-up handshake and sends "READY" to
the front end only after it returns (core.py@7afe0faa L839, L977).

So for the engine under construction when the plugin loads, a data
descriptor on its class catches the assignment of ``step_fn``: the
scheduler and executor exist by then; the engine's objects are hooked and
the status line is written, before the engine reports ready, and the
descriptor removes itself. Engines constructed later in the process are set
up when ``EngineCore.__init__`` (wrapped) returns. An engine of a class the
plugin never saw being built is set up at its first step, and its status
says so.
"""

from __future__ import annotations

import logging
import types

from ._recorder import STATE
from .gpu import GPU, find_runner
from .hooks import READY, _is_wrapped, _mark, _patch_resolved, _step_wrapper, wrap_launch, wrap_meta, \
    wrap_schedule, wrap_update, instrument_connector

_vllm_version = "unknown"
logger = logging.getLogger("vllm.mbench_vllm")


def hook_engine_class(ec, version: str) -> None:
    """At plugin install: set up engines as they are built (see module doc)."""
    global _vllm_version
    _vllm_version = version
    if "__init__" in ec.__dict__:
        ec.__init__ = wrap_engine_init(ec.__dict__["__init__"])
    try:
        eng = _engine_under_construction(ec)
    except Exception:
        eng = None
    if eng is not None:
        # Called from EngineCore.__init__ (load_general_plugins): this is the
        # core process, and its engine is not built yet.
        STATE.core_process = True
        cls = type(eng)
        for name in ("step", "step_with_batch_queue"):
            if callable(getattr(cls, name, None)):
                _patch_resolved(cls, name, _step_wrapper(name))
        _intercept_step_fn(cls)


def _intercept_step_fn(cls) -> None:
    """Set up the engine when its __init__ assigns step_fn (then remove this)."""
    if "step_fn" in cls.__dict__:
        return

    class StepFnSetter:
        def __get__(self, obj, owner=None):
            if obj is None:
                return self
            try:
                return obj.__dict__["step_fn"]
            except KeyError:
                raise AttributeError("step_fn") from None

        def __set__(self, obj, value):
            obj.__dict__["step_fn"] = value
            if cls.__dict__.get("step_fn") is self:
                delattr(cls, "step_fn")
            after_engine_init(obj)

    setattr(cls, "step_fn", StepFnSetter())


def wrap_engine_init(orig):
    if _is_wrapped(orig):
        return orig

    def __init__(self, *args, **kwargs):
        STATE.core_process = True
        orig(self, *args, **kwargs)
        after_engine_init(self)

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


def after_engine_init(engine, late: bool = False) -> None:
    """Hook the objects ``engine`` uses and write its status line. Never
    raises: a failure is a problem in the status line."""
    if READY in engine.__dict__:
        return
    engine.__dict__[READY] = True
    STATE.core_process = True
    try:
        problems = _hook_engine_objects(engine)
    except Exception as exc:  # never break vLLM start-up
        problems = {"engine set-up": f"failed: {exc!r}"}
    if late:
        problems["engine set-up"] = ("done at the first step, after the engine reported ready "
                                     f"({type(engine).__name__} was not seen being built)")
    runner, why = find_runner(engine)
    if runner is not None:
        try:
            GPU.install_runner(runner)
        except Exception as exc:
            GPU.not_measured(f"hooking {type(runner).__name__} failed: {exc!r}")
    else:
        GPU.not_measured(why)
    for k, v in problems.items():
        STATE.problem(k, v)
    if STATE.step_log is None:
        return
    path = "batch_queue" if getattr(engine, "batch_queue", None) is not None else "step"
    STATE.set_status(vllm=_vllm_version, path=path, gpu=GPU.status())
    STATE.write_status_now()
    if problems:
        logger.warning(
            "mbench_vllm: cannot hook %s in engine %s; those timers are absent from "
            "every line and the step decomposition is incomplete",
            "; ".join(f"{k} ({v})" for k, v in problems.items()), type(engine).__name__)


def _hook_engine_objects(engine) -> dict[str, str]:
    """Hook the scheduler class and executor instance this engine uses."""
    st = STATE
    cls = type(engine)
    for name in ("step", "step_with_batch_queue"):
        if callable(getattr(cls, name, None)):
            _patch_resolved(cls, name, _step_wrapper(name))
    problems: dict[str, str] = {}
    _hook_scheduler(engine, problems)
    ex = getattr(engine, "model_executor", None)
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
    st.refresh_template()
    fn = engine.__dict__.get("step_fn")
    func = getattr(fn, "__func__", None)
    if func is not None and not _is_wrapped(func) and getattr(fn, "__self__", None) is engine:
        engine.step_fn = types.MethodType(_step_wrapper(func.__name__)(func), engine)
    return problems


def _hook_scheduler(engine, problems: dict[str, str]) -> None:
    """Hook the class of the object ``engine.scheduler`` holds now."""
    st = STATE
    sched = getattr(engine, "scheduler", None)
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


def rehook_scheduler(engine) -> None:
    """A step found ``engine.scheduler`` holding an object of a class not
    seen at its last step (a platform's scheduler installed after the engine
    was built): hook that class as at construction; a hook that cannot be
    applied is a problem in the status line. Never raises."""
    problems: dict[str, str] = {}
    try:
        _hook_scheduler(engine, problems)
    except Exception as exc:
        problems["scheduler set-up"] = f"failed: {exc!r}"
    STATE.refresh_template()
    for k, v in problems.items():
        STATE.problem(k, v)
