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
import threading
from dataclasses import dataclass, field
from typing import Any

from . import _recorder as _rec
from ._recorder import STATE, _perf_ns
from .steplog import S_BATCH, S_EXEC, S_GF, S_LAUNCH, S_META, S_SCHED, S_UPD, S_WAIT

MARK = "__mbench_wrapped__"
READY = "_mbench_hooked"  # set on an engine instance once its objects are hooked

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
    for name in ("__name__", "__qualname__"):
        v = getattr(orig, name, None)
        if v is not None:
            setattr(f, name, v)
    f.__doc__ = getattr(orig, "__doc__", None)
    return f


# Each wrap_* below returns the C Timer of _fastwrap.c where it is loaded
# (_recorder.FAST), else the Python wrapper, which is the specification:
# the C code does the same, in the same order.


def _late_setup(engine) -> None:
    """The step timer's call, before a step, for an engine not set up at
    construction (all its objects are hooked now, late) or whose
    ``scheduler`` holds an object of a class not seen at its last step (a
    platform's scheduler installed after the engine was built: that class is
    hooked, so its ``schedule()`` is timed whether or not it calls super())."""
    from .engine import after_engine_init, rehook_scheduler

    if READY not in engine.__dict__:
        after_engine_init(engine, late=True)
    else:
        rehook_scheduler(engine)


def wrap_step(orig, batch_queue: bool = False):
    """One engine step: a call of step() or step_with_batch_queue()."""
    if _is_wrapped(orig):
        return orig
    fw = _rec.FAST
    if fw is not None:
        return _mark(fw.Timer(orig, STATE, fw.K_STEP, bq=batch_queue, hook=_late_setup), orig)
    st = STATE
    perf = _perf_ns
    ident = threading.get_ident
    bq = int(batch_queue)
    seen = [None]  # the class of the engine's scheduler when last hooked

    def step(self, *args, **kwargs):
        if st.in_step:
            return orig(self, *args, **kwargs)
        d = self.__dict__
        sched = d.get("scheduler")
        if READY not in d or (sched is not None and type(sched) is not seen[0]):
            # Not set up at construction (an engine class the plugin did not
            # see being built), or a scheduler of a class not seen at the
            # last step: hook what the engine uses now.
            _late_setup(self)
            sched = d.get("scheduler")
            seen[0] = None if sched is None else type(sched)
        st.in_step = True
        st.step_thread = ident()
        st.acc[:] = st.tmpl[bq]
        st.t_sched_end = 0
        st.sched_out = None
        t0 = st.t_step = perf()
        try:
            res = orig(self, *args, **kwargs)
        finally:
            t1 = perf()
            st.in_step = False
        if st.step_log is not None:
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
    multiproc executor it only sends the request), and the first time a
    future class comes back, wraps that class's ``result`` so the engine
    thread's wait for a batch is timed (``wait_us``): no per-future work."""
    if _is_wrapped(orig):
        return orig
    fw = _rec.FAST
    if fw is not None:
        return _mark(fw.Timer(orig, STATE, fw.K_LAUNCH, hook=_time_future_class, seen=_future_classes), orig)
    st = STATE
    perf = _perf_ns
    seen = _future_classes

    def launch(*args, **kwargs):
        if st.in_launch or not st.in_step:
            return orig(*args, **kwargs)
        st.in_launch = True
        t0 = perf()
        try:
            out = orig(*args, **kwargs)
        finally:
            st.acc[S_LAUNCH] += perf() - t0
            st.in_launch = False
        if type(out) not in seen:
            _time_future_class(type(out))
        return out

    return _mark(launch, orig)


_future_classes: set = set()  # classes of launch results already looked at


def _time_future_class(cls) -> None:
    _future_classes.add(cls)
    res = getattr(cls, "result", None)
    if res is None or not callable(res):
        return  # not a future (a blocking call's output): nothing to wait on
    try:
        if not _patch_resolved(cls, "result", _wrap_result):
            STATE.problem("wait_us", f"{cls.__name__}.result is not a patchable method")
    except Exception as exc:  # its wait stays in unaccounted_us
        STATE.problem("wait_us", f"cannot wrap {cls.__name__}.result: {exc!r}")


def _wrap_result(orig):
    """A future class's result(): the engine thread's wait, during a step,
    outside a launch (the executor's own done()/result() check), once."""
    fw = _rec.FAST
    if fw is not None:
        return _mark(fw.Timer(orig, STATE, fw.K_WAIT), orig)
    st = STATE
    perf = _perf_ns
    ident = threading.get_ident

    def result(self, *args, **kwargs):
        if not st.in_step or st.in_wait or st.in_launch or ident() != st.step_thread:
            return orig(self, *args, **kwargs)
        st.in_wait = True
        t0 = perf()
        try:
            return orig(self, *args, **kwargs)
        finally:
            st.acc[S_WAIT] += perf() - t0
            st.in_wait = False

    return _mark(result, orig)


BATCH_ATTR = "_mbench_batch"


def wrap_schedule(orig):
    """Scheduler.schedule: times it and tags its SchedulerOutput with a batch
    id (an attribute: it travels with the object to an in-process worker
    and, pickled, to worker processes), the identity gpu_us joins on."""
    if _is_wrapped(orig):
        return orig
    fw = _rec.FAST
    if fw is not None:
        return _mark(fw.Timer(orig, STATE, fw.K_SCHED), orig)
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
            st.acc[S_SCHED] += t1 - t0
            st.t_sched_end = t1
        st.sched_out = out
        b = st.batch_seq = st.batch_seq + 1
        try:
            out._mbench_batch = b
        except Exception as exc:
            st.problem("batch id", f"cannot tag {type(out).__name__}: {exc!r}; gpu_us cannot be joined to steps")
        return out

    return _mark(schedule, orig)


def wrap_meta(orig):
    """build_connector_meta or Scheduler._build_kv_connector_meta."""
    if _is_wrapped(orig):
        return orig
    fw = _rec.FAST
    if fw is not None:
        return _mark(fw.Timer(orig, STATE, fw.K_META), orig)
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
            st.acc[S_META] += perf() - t0
            st.in_meta = False

    return _mark(build_meta, orig)


def wrap_update(orig):
    if _is_wrapped(orig):
        return orig
    fw = _rec.FAST
    if fw is not None:
        return _mark(fw.Timer(orig, STATE, fw.K_UPDATE), orig)
    st = STATE
    perf = _perf_ns

    def update_from_output(self, *args, **kwargs):
        if st.in_update or not st.in_step:
            return orig(self, *args, **kwargs)
        st.in_update = True
        acc = st.acc
        so = args[0] if args else kwargs.get("scheduler_output")
        acc[S_BATCH] = getattr(so, BATCH_ATTR, 0) or 0
        t0 = perf()
        # execute_us (step() path): from the end of schedule() in this call,
        # or the step's start when it scheduled nothing; the reader drops it
        # where either hook is missing.
        acc[S_EXEC] += t0 - (st.t_sched_end or st.t_step)
        try:
            return orig(self, *args, **kwargs)
        finally:
            acc[S_UPD] += perf() - t0
            st.in_update = False

    return _mark(update_from_output, orig)


def wrap_get_finished(orig):
    """Worker-side finished-transfer poll (get_finished / get_transfer_results)."""
    if _is_wrapped(orig):
        return orig
    fw = _rec.FAST
    if fw is not None:
        return _mark(fw.Timer(orig, STATE, fw.K_GF, hook=STATE.record_get_finished), orig)
    st = STATE
    perf = _perf_ns
    ident = threading.get_ident

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
            if st.in_step and ident() == st.step_thread:  # the inline executor: into this step
                st.acc[S_GF] += t1 - t0
            else:
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
        # The mixin calls get_transfer_results where vLLM has it (main; the
        # base's default calls get_finished), else get_finished (0.18.1):
        # time the outer one only.
        wrapper = wrap_get_finished
        names = ("get_transfer_results",) if callable(getattr(conn, "get_transfer_results", None)) \
            else ("get_finished",)
    elif "SCHEDULER" in role:
        names, wrapper = ("build_connector_meta",), wrap_meta
    else:
        return
    hooked = False
    for name in names:
        bound = getattr(conn, name, None)
        if bound is None:
            continue
        if _is_wrapped(getattr(bound, "__func__", bound)):
            hooked = True
            continue
        try:
            setattr(conn, name, wrapper(bound))
            hooked = True
        except Exception as exc:
            # __slots__ or a read-only attribute: wrap on the concrete class.
            try:
                hooked = _patch_resolved(type(conn), name, wrapper) or hooked
            except Exception as exc2:
                STATE.problem(f"{type(conn).__name__}.{name}", f"cannot wrap: {exc!r}; {exc2!r}")
    if not hooked:
        field = "get_finished_us" if "WORKER" in role else "build_meta_us"
        STATE.problem(f"{type(conn).__name__} ({role.lower()} connector)",
                      f"has none of {', '.join(names)}: {field} is not timed")


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
        except Exception as exc:
            STATE.problem(f"{type(conn).__name__} connector", f"cannot be instrumented: {exc!r}")
        return conn

    _mark(create_connector, func)
    if is_cm:
        setattr(factory_cls, "create_connector", classmethod(create_connector))
    elif isinstance(raw, staticmethod):
        setattr(factory_cls, "create_connector", staticmethod(create_connector))
    else:
        setattr(factory_cls, "create_connector", create_connector)
    return True


def install(t: Targets) -> dict[str, str]:
    """Patch every hook point found in t. Returns the status of each hook."""
    status = t.status()
    ec, sc, fa = t.engine_core, t.scheduler, t.factory
    if ec is not None:
        for name in ("step", "step_with_batch_queue"):
            if status[f"EngineCore.{name}"] == "OK":
                _patch_resolved(ec, name, _step_wrapper(name))
        from . import engine as engine_setup

        engine_setup.hook_engine_class(ec, t.version)
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
    STATE.refresh_template()
    status["execute"] = (
        "OK (derived: end of schedule() to start of update_from_output())"
        if STATE.has_execute
        else "missing: needs both Scheduler.schedule and Scheduler.update_from_output"
    )
    return status
