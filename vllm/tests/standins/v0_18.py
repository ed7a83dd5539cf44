"""Stand-in for vLLM v0.18.1 (seed 003's vLLM): the control flow of the
files the plugin hooks, transcribed, with a fake GPU (fakegpu.py).

Pinned: tag v0.18.1 = vllm-project/vllm@a26e8dc7ff2111a005144d775ecf9cebf56c45b2.
That commit is on the release branch and is not in the snapshots that could
be read, so each file was read (``git show``) at the last upstream main
commit that changed it before the v0.18 release branch was cut (before
2026-03-17 20:13 UTC: v0.18.1 cherry-picks main's #37158 of that time); no
v0.18.1 cherry-pick (#38562, #37158, #37605, #38391, #38083) touches these
files. ``EngineCore.__init__``, ``step`` and ``step_with_batch_queue`` are
identical at every core.py commit from 35bdca54 (2026-03-11) to 80b70884
(2026-03-21). Line numbers are of these commits:

* vllm/v1/engine/core.py @ 7afe0faab1eb2ab84cda5cab29b24046e516f7b8:
  ``EngineCore.__init__`` L88-L224 — ``load_general_plugins()`` L99, the
  executor L112, ``get_scheduler_cls()`` L126, the scheduler L141,
  ``batch_queue_size = self.model_executor.max_concurrent_batches`` L183,
  ``step_fn`` L208. ``step()`` L378-L407: ``schedule()`` L389,
  ``execute_model(non_block=True)`` L390, ``future.result()`` L396, a
  blocking ``sample_tokens`` when it was None L398, update L403.
  ``step_with_batch_queue()`` L419-L535: ``schedule()`` L447,
  ``execute_model(non_block=True)`` L449, ``sample_tokens(non_block=True)``
  L465 unless sampling is deferred, the early return while the queue is not
  full and the oldest batch's future is not ``done()`` L476-L483, ``pop``
  L492, ``future.result()`` L497, update L507, the deferred
  ``sample_tokens`` L532.
* vllm/v1/executor/uniproc_executor.py @ fa0d353acfa3de7610fdcdb6d23b3b34109c5749:
  a one-thread ``ThreadPoolExecutor`` "WorkerAsyncOutput" when
  ``max_concurrent_batches > 1`` (L40-L44; 2 with async scheduling, L61-L63);
  ``collective_rpc`` runs the worker method inline (L78/L82) and hands an
  ``AsyncModelRunnerOutput``'s ``get_output`` to that thread (L83-L91), other
  results come back as completed futures (L93-L94); ``execute_model``
  (L100-L113) raises a failed task at once (``output.done()`` L110);
  ``sample_tokens`` L115-L123.
* vllm/v1/core/sched/scheduler.py @ 35bdca5431e652b4c00267489a632c1bf5522103:
  the scheduler-role connector from the factory (L120-L131); ``schedule()``
  (L338) builds the metadata inline, ``self.connector.build_connector_meta``
  (L912-L913) — no ``_build_kv_connector_meta``; ``update_from_output`` L1275.
* vllm/distributed/kv_transfer/kv_connector/factory.py @
  8cb24d3aedb9f431fb15a636a3e11a00262f5991: ``create_connector(cls, config,
  role, kv_cache_config=None)`` L43-L82: no kv_transfer_config raises
  (L50-L51); the hybrid KV cache manager on and a class that is not
  ``SupportsHMA`` raises (L56-L62); a class whose ``__init__`` does not take
  ``kv_cache_config`` (``supports_kw``, L124) is built the old way,
  ``(config, role)`` (L77-L79); registry first, then the module path
  (L110-L118).
* vllm/distributed/kv_transfer/kv_connector/v1/base.py @
  a1a3523a5647a58e00096ca7430e9f1ad4a50a97: ``SupportsHMA`` L84 (abstract
  ``request_finished_all_groups`` L92), ``supports_hma`` L116;
  ``KVConnectorBase_V1.__init__(vllm_config, role, kv_cache_config=None)``
  L183, raising without a kv_transfer_config (L195-L198).
* the mixin and the worker side: runner.py (make_mixin: get_finished).
* vllm/config/scheduler.py @ 682566b18e69d12a1ee603906417f508d61ac7ea:
  ``async_scheduling: bool | None = Field(default=None)`` L138 on a pydantic
  dataclass (``@config``, L25; vllm/config/utils.py ``config`` makes
  ``pydantic.dataclasses.dataclass``): the stdlib field's default is a
  pydantic ``FieldInfo``. vllm/config/vllm.py @ a3e2e250 L718-L752 turns
  None into True unless something is incompatible.
"""

from __future__ import annotations

import enum
import inspect
import queue
from abc import ABC, abstractmethod
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from types import SimpleNamespace

from . import runner as rn
from .common import KVConnectorOutput, make_plugins_module, make_scheduler_output, perf, spin

VERSION = "0.18.1"
COMMIT = "a26e8dc7ff2111a005144d775ecf9cebf56c45b2"


def supports_kw(fn, kw_name: str) -> bool:
    """vllm.utils.func_utils.supports_kw: the parameter exists, or **kwargs."""
    params = inspect.signature(fn).parameters
    p = params.get(kw_name)
    if p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
        return True
    return any(q.kind is q.VAR_KEYWORD for q in params.values())


class FieldInfo:
    """What a pydantic dataclass field's ``default`` is: not the value."""

    def __init__(self, default):
        self.default = default


def make_connector_classes(base_init_requires_kv_cache_config: bool):
    """The connector ABCs (base.py): role, metadata, base, SupportsHMA."""

    class KVConnectorRole(enum.Enum):
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata(ABC):  # noqa: B024
        pass

    class SupportsHMA(ABC):
        @abstractmethod
        def request_finished_all_groups(self, request, block_ids): ...

    def supports_hma(connector) -> bool:
        if isinstance(connector, type):
            return issubclass(connector, SupportsHMA)
        return isinstance(connector, SupportsHMA)

    class KVConnectorBase_V1(ABC):
        def __init__(self, vllm_config, role, kv_cache_config=None):
            self._connector_metadata = None
            self._vllm_config = vllm_config
            if vllm_config.kv_transfer_config is not None:
                self._kv_transfer_config = vllm_config.kv_transfer_config
            else:
                raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
            self._kv_cache_config = kv_cache_config
            self._role = role

        @property
        def role(self):
            return self._role

        def bind_connector_metadata(self, connector_metadata):
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self):
            self._connector_metadata = None

        @abstractmethod
        def start_load_kv(self, forward_context, **kwargs): ...

        @abstractmethod
        def wait_for_layer_load(self, layer_name): ...

        @abstractmethod
        def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs): ...

        @abstractmethod
        def wait_for_save(self): ...

        def get_finished(self, finished_req_ids):
            return None, None

        def get_block_ids_with_load_errors(self):
            return set()

        @abstractmethod
        def get_num_new_matched_tokens(self, request, num_computed_tokens): ...

        @abstractmethod
        def update_state_after_alloc(self, request, blocks, num_external_tokens): ...

        @abstractmethod
        def build_connector_meta(self, scheduler_output): ...

        def request_finished(self, request, block_ids):
            return False, None

    if base_init_requires_kv_cache_config:
        _init = KVConnectorBase_V1.__init__

        def __init__(self, vllm_config, role, kv_cache_config):  # required on main
            _init(self, vllm_config, role, kv_cache_config)

        KVConnectorBase_V1.__init__ = __init__

    class SlowMetadata(KVConnectorMetadata):
        pass

    class SlowConnector(KVConnectorBase_V1):
        """A connector with injected costs that overrides get_finished and
        build_connector_meta, as real ones (Mooncake, NIXL) do; not
        SupportsHMA (vLLM turns the hybrid KV cache manager off for a
        connector unless asked, config/vllm.py@a3e2e250 L1163-L1179)."""

        def start_load_kv(self, forward_context, **kwargs):
            pass

        def wait_for_layer_load(self, layer_name):
            pass

        def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
            pass

        def wait_for_save(self):
            pass

        def get_finished(self, finished_req_ids):
            t = self._vllm_config.timings
            t0 = perf()
            spin(t.get_finished)
            t.note("get_finished", perf() - t0)
            return set(), set()

        def get_num_new_matched_tokens(self, request, num_computed_tokens):
            return 0, False

        def update_state_after_alloc(self, request, blocks, num_external_tokens):
            pass

        def build_connector_meta(self, scheduler_output):
            t = self._vllm_config.timings
            t0 = perf()
            spin(t.build_meta)
            t.note("build_meta", perf() - t0)
            return SlowMetadata()

    return SimpleNamespace(KVConnectorRole=KVConnectorRole, KVConnectorMetadata=KVConnectorMetadata,
                           SupportsHMA=SupportsHMA, supports_hma=supports_hma,
                           KVConnectorBase_V1=KVConnectorBase_V1, SlowConnector=SlowConnector)


def make():
    """Fresh stand-in classes of 0.18.1 (a new set per call: no patch leaks)."""
    plugins = make_plugins_module()
    state = SimpleNamespace(agent=None)
    cc = make_connector_classes(base_init_requires_kv_cache_config=False)
    Role = cc.KVConnectorRole

    class KVConnectorFactory:
        _registry = {"SlowConnector": lambda: cc.SlowConnector}

        @classmethod
        def create_connector(cls, config, role, kv_cache_config=None):
            kv_transfer_config = config.kv_transfer_config
            if kv_transfer_config is None:
                raise ValueError("kv_transfer_config must be set to create a connector")
            connector_cls, compat_sig = cls._get_connector_class_with_compat(kv_transfer_config)
            hma_enabled = not config.scheduler_config.disable_hybrid_kv_cache_manager
            if hma_enabled and not cc.supports_hma(connector_cls):
                raise ValueError(
                    f"Connector {connector_cls.__name__} does not support HMA but "
                    "HMA is enabled. Please set `--disable-hybrid-kv-cache-manager`.")
            if compat_sig:
                return connector_cls(config, role)
            return connector_cls(config, role, kv_cache_config)

        @classmethod
        def _get_connector_class_with_compat(cls, kv_transfer_config):
            name = kv_transfer_config.kv_connector
            if name is None:
                raise ValueError("Connector name is not set in KVTransferConfig")
            compat_sig = False
            if name in cls._registry:
                connector_cls = cls._registry[name]()
            else:
                path = kv_transfer_config.kv_connector_module_path
                if path is None:
                    raise ValueError(f"Unsupported connector type: {name}")
                import importlib

                connector_cls = getattr(importlib.import_module(path), name)
                if not supports_kw(connector_cls, "kv_cache_config"):
                    compat_sig = True
            return connector_cls, compat_sig

        @classmethod
        def get_connector_class(cls, kv_transfer_config):
            return cls._get_connector_class_with_compat(kv_transfer_config)[0]

    def ensure_kv_transfer_initialized(vllm_config, kv_cache_config="kvcfg"):
        if vllm_config.kv_transfer_config is not None and state.agent is None:
            state.agent = KVConnectorFactory.create_connector(
                config=vllm_config, role=Role.WORKER, kv_cache_config=kv_cache_config)

    runner_cls = rn.fresh_runner_class()
    mixin = rn.make_mixin(state, KVConnectorOutput, use_transfer_results=False)

    class UniProcExecutor:
        """uniproc_executor.py@fa0d353a (see the module doc)."""

        def __init__(self, vllm_config):
            self.vllm_config = vllm_config
            self.scheduler_config = vllm_config.scheduler_config
            self._init_executor()

        def _init_executor(self):
            self.driver_worker = rn.WorkerWrapperBase(rpc_rank=0)
            self.async_output_thread = None
            if self.max_concurrent_batches > 1:
                self.async_output_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="WorkerAsyncOutput")
            self.driver_worker.init_worker(
                plugins, lambda: rn.Worker(self.vllm_config, mixin, ensure_kv_transfer_initialized, runner_cls))

        @property
        def max_concurrent_batches(self):
            return 2 if self.scheduler_config.async_scheduling else 1

        def collective_rpc(self, method, timeout=None, args=(), kwargs=None, non_block=False, single_value=False):
            if kwargs is None:
                kwargs = {}
            if not non_block:
                result = rn.run_method(self.driver_worker, method, args, kwargs)
                return result if single_value else [result]
            try:
                result = rn.run_method(self.driver_worker, method, args, kwargs)
                if getattr(result, "is_async", False):  # an AsyncModelRunnerOutput
                    if (async_thread := self.async_output_thread) is not None:
                        if single_value:
                            return async_thread.submit(result.get_output)
                        return async_thread.submit(lambda: [result.get_output()])
                    result = result.get_output()
                future = Future()
                future.set_result(result if single_value else [result])
            except Exception as e:
                future = Future()
                future.set_exception(e)
            return future

        def execute_model(self, scheduler_output, non_block=False):
            output = self.collective_rpc("execute_model", args=(scheduler_output,), non_block=non_block,
                                         single_value=True)
            if non_block and output.done():
                output.result()
            return output

        def sample_tokens(self, grammar_output, non_block=False):
            return self.collective_rpc("sample_tokens", args=(grammar_output,), non_block=non_block,
                                       single_value=True)

        def shutdown(self):
            if self.async_output_thread is not None:
                self.async_output_thread.shutdown(wait=True)

    Scheduler = make_scheduler(KVConnectorFactory, Role, meta_via_method=False)

    import dataclasses

    # A pydantic dataclass's field, as dataclasses.fields() shows it.
    SchedulerConfig = dataclasses.dataclass(
        type("SchedulerConfig", (), {"__annotations__": {"async_scheduling": "bool | None"},
                                     "async_scheduling": dataclasses.field(default=FieldInfo(None))}))

    EngineCore = make_engine_core(plugins, Scheduler, early_return_checks_done=True,
                                  batch_queue_size_from_executor=True, throttle=False)
    return SimpleNamespace(
        version=VERSION, plugins=plugins, state=state, **vars(cc),
        KVConnectorFactory=KVConnectorFactory, KVConnectorModelRunnerMixin=mixin,
        Executor=UniProcExecutor, UniProcExecutor=UniProcExecutor, GPUModelRunner=runner_cls, Scheduler=Scheduler,
        EngineCore=EngineCore, SchedulerConfig=SchedulerConfig,
        ensure_kv_transfer_initialized=ensure_kv_transfer_initialized, supports_kw=supports_kw,
    )


def make_scheduler(factory, Role, meta_via_method: bool):
    """Scheduler: the connector from the factory (scheduler.py@35bdca54
    L120-L131), schedule() building the metadata inline (0.18.1, L912-L913)
    or through _build_kv_connector_meta (main @f80b66f5 L1297-L1298,
    L1317-L1320; schedule(throttle_prefills) L476), update_from_output."""

    class Scheduler:
        def __init__(self, vllm_config, kv_cache_config=None, **kwargs):
            self.vllm_config = vllm_config
            self.connector = None
            if vllm_config.kv_transfer_config is not None:
                self.connector = factory.create_connector(
                    config=vllm_config, role=Role.SCHEDULER, kv_cache_config=kv_cache_config)
            self.running = [object()] * vllm_config.decode
            self.waiting = deque([object()])
            self.steps = 0

        def has_requests(self):
            return True

        def get_kv_connector(self):
            return self.connector

        def schedule(self, *throttle_prefills):
            t = self.vllm_config.timings
            t0 = perf()
            spin(t.schedule)
            scheduler_output = make_scheduler_output(self.vllm_config, self.steps)
            k = self.vllm_config.deferred_every
            scheduler_output.pending_structured_output_tokens = bool(k) and self.steps % k == k - 1
            self.steps += 1
            if self.connector is not None:
                if meta_via_method:
                    meta = self._build_kv_connector_meta(self.connector, scheduler_output)
                else:
                    meta = self.connector.build_connector_meta(scheduler_output)
                scheduler_output.kv_connector_metadata = meta
            t.note("schedule", perf() - t0)
            return scheduler_output

        def get_grammar_bitmask(self, scheduler_output):
            return None

        def update_from_output(self, scheduler_output, model_runner_output):
            t = self.vllm_config.timings
            t0 = perf()
            spin(t.update)
            t.note("update", perf() - t0)
            return {0: model_runner_output}

        def update_draft_token_ids_in_output(self, draft_token_ids, scheduler_output):
            pass

    if meta_via_method:
        def _build_kv_connector_meta(self, connector, scheduler_output):
            return connector.build_connector_meta(scheduler_output)

        Scheduler._build_kv_connector_meta = _build_kv_connector_meta
    return Scheduler


def make_engine_core(plugins, default_scheduler, early_return_checks_done: bool,
                     batch_queue_size_from_executor: bool, throttle: bool):
    """EngineCore of core.py: 0.18.1 (early return checks the oldest
    future's done(), batch-queue size from the executor, schedule()) or main
    (no done() check, size from vllm_config, schedule(throttle_prefills))."""

    class EngineCore:
        def __init__(self, vllm_config, executor_class, log_stats, executor_fail_callback=None,
                     include_finished_set=False):
            from vllm.plugins import load_general_plugins

            load_general_plugins()
            self.vllm_config = vllm_config
            self.log_stats = log_stats
            self.model_executor = executor_class(vllm_config)
            Scheduler = vllm_config.scheduler_cls or default_scheduler  # get_scheduler_cls()
            self.scheduler = Scheduler(vllm_config=vllm_config, kv_cache_config="kvcfg",
                                       include_finished_set=include_finished_set, log_stats=log_stats)
            self.use_spec_decode = False
            self.check_for_draft_tokens = False
            if batch_queue_size_from_executor:
                self.batch_queue_size = self.model_executor.max_concurrent_batches
            else:
                self.batch_queue_size = vllm_config.max_concurrent_batches
            self.batch_queue = None
            if self.batch_queue_size > 1:
                self.batch_queue = deque(maxlen=self.batch_queue_size)
            self.is_ec_consumer = True
            self.is_pooling_model = False
            self.step_fn = self.step if self.batch_queue is None else self.step_with_batch_queue
            self.async_scheduling = vllm_config.async_scheduling
            self.aborts_queue = queue.Queue()

        @contextmanager
        def log_error_detail(self, scheduler_output):
            yield

        @contextmanager
        def log_iteration_details(self, scheduler_output):
            yield

        def _schedule(self):
            if throttle:
                return self.scheduler.schedule(self._should_throttle_prefills())
            return self.scheduler.schedule()

        def _should_throttle_prefills(self):
            return False

        def _process_aborts_queue(self):
            if not self.aborts_queue.empty():
                self.aborts_queue.get_nowait()

        def step(self):
            if not self.scheduler.has_requests():
                return {}, False
            scheduler_output = self._schedule()
            future = self.model_executor.execute_model(scheduler_output, non_block=True)
            grammar_output = self.scheduler.get_grammar_bitmask(scheduler_output)
            with self.log_error_detail(scheduler_output), self.log_iteration_details(scheduler_output):
                model_output = future.result()
                if model_output is None:
                    model_output = self.model_executor.sample_tokens(grammar_output)
            self._process_aborts_queue()
            engine_core_outputs = self.scheduler.update_from_output(scheduler_output, model_output)
            return engine_core_outputs, scheduler_output.total_num_scheduled_tokens > 0

        def step_with_batch_queue(self):
            batch_queue = self.batch_queue
            assert batch_queue is not None
            assert len(batch_queue) < self.batch_queue_size
            model_executed = False
            deferred_scheduler_output = None
            if self.scheduler.has_requests():
                scheduler_output = self._schedule()
                with self.log_error_detail(scheduler_output):
                    exec_future = self.model_executor.execute_model(scheduler_output, non_block=True)
                if self.is_ec_consumer:
                    model_executed = scheduler_output.total_num_scheduled_tokens > 0
                if self.is_pooling_model or not model_executed:
                    future = exec_future
                elif not scheduler_output.pending_structured_output_tokens:
                    grammar_output = self.scheduler.get_grammar_bitmask(scheduler_output)
                    future = self.model_executor.sample_tokens(grammar_output, non_block=True)
                else:
                    deferred_scheduler_output = scheduler_output
                if not deferred_scheduler_output:
                    batch_queue.appendleft((future, scheduler_output, exec_future))
                    if early_return_checks_done:
                        if (model_executed and len(batch_queue) < self.batch_queue_size
                                and not batch_queue[-1][0].done()):
                            return None, True
                    elif len(batch_queue) < self.batch_queue_size and (
                            model_executed or self.scheduler.has_requests()):
                        return None, model_executed
            elif not batch_queue:
                return None, False
            future, scheduler_output, exec_model_fut = batch_queue.pop()
            with self.log_error_detail(scheduler_output), self.log_iteration_details(scheduler_output):
                model_output = future.result()
                if model_output is None:
                    exec_model_fut.result()
                    raise RuntimeError("unexpected error")
            self._process_aborts_queue()
            engine_core_outputs = self.scheduler.update_from_output(scheduler_output, model_output)
            if deferred_scheduler_output:
                grammar_output = self.scheduler.get_grammar_bitmask(deferred_scheduler_output)
                future = self.model_executor.sample_tokens(grammar_output, non_block=True)
                batch_queue.appendleft((future, deferred_scheduler_output, exec_future))
            return engine_core_outputs, model_executed

    return EngineCore
