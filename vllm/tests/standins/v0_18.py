"""Stand-ins for vLLM 0.18.x (seed 003 runs 0.18.1).

Sources read (method names, signatures, call order):

* vllm/v1/core/sched/scheduler.py at
  vllm-project/vllm@00024d314514900f361ad072af6931e403b7f589 (0.16-0.18 line:
  V2 model runner flag, streaming sessions) and the v0.18.0 ``schedule()``
  body copied in RBLN-SW/vllm-rbln (vllm_rbln/v1/core/rbln_scheduler.py,
  "Copied from .../blob/v0.18.0/vllm/v1/core/sched/scheduler.py#L338-L927"):
  ``schedule(self)`` ends with inline ``meta = self.connector.
  build_connector_meta(scheduler_output)`` — no ``_build_kv_connector_meta``;
  ``update_from_output(self, scheduler_output, model_runner_output)``;
  ``get_grammar_bitmask(self, scheduler_output)``. The scheduler creates
  its connector with ``KVConnectorFactory.create_connector(config=...,
  role=KVConnectorRole.SCHEDULER, kv_cache_config=...)``.
* vllm/v1/engine/core.py, 0.12-0.18 line (AKafakA/vllm fork at 11405129,
  identical in these methods to upstream of that period, and upstream main
  00080ee1): ``step()``: schedule → ``execute_model(scheduler_output,
  non_block=True)`` → ``get_grammar_bitmask`` → inside ``log_error_detail``:
  ``future.result()``, ``sample_tokens(grammar_output)`` when it returned None
  → ``_process_aborts_queue()`` → ``update_from_output``.
  ``step_with_batch_queue()``: schedule → execute_model(non_block=True) →
  sample_tokens(grammar_output, non_block=True) → ``batch_queue.appendleft(
  (future, scheduler_output, exec_future))`` → early ``return None,
  model_executed`` while not full → pop → ``future.result()`` → update.
* vllm/distributed/kv_transfer/kv_connector/v1/base.py, 0.11-0.18 line
  (vllm PR-27955 docs build): ``__init__(self, vllm_config, role,
  kv_cache_config: KVCacheConfig | None = None)``.
* factory ``create_connector(cls, config, role, kv_cache_config=None)``
  (reconstructed: connectors whose ``__init__`` does not name
  ``kv_cache_config`` are called the old way, ``(config, role)``).
* mixin ``_get_kv_connector_output``: ``kv_connector.get_finished(
  scheduler_output.finished_req_ids)`` on ``get_kv_transfer_group()``.
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

from .common import (
    KVConnectorOutput,
    ModelRunnerOutput,
    make_plugins_module,
    make_scheduler_output,
    perf,
    spin,
)

VERSION = "0.18.1"


def _done(value) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


def make():
    plugins = make_plugins_module()
    state = SimpleNamespace(agent=None)

    class KVConnectorRole(enum.Enum):
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata(ABC):  # noqa: B024
        pass

    class KVConnectorBase_V1(ABC):
        def __init__(self, vllm_config, role, kv_cache_config=None):
            # base.py L196-L213 (0.11+): a config without kv_transfer_config
            # (or None) is rejected.
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

    class SlowMetadata(KVConnectorMetadata):
        pass

    class SlowConnector(KVConnectorBase_V1):
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

    class KVConnectorFactory:
        _registry = {"SlowConnector": lambda: SlowConnector}

        @classmethod
        def create_connector(cls, config, role, kv_cache_config=None):
            connector_cls = cls.get_connector_class(config.kv_transfer_config)
            params = inspect.signature(connector_cls.__init__).parameters
            if "kv_cache_config" in params:
                return connector_cls(config, role, kv_cache_config)
            return connector_cls(config, role)

        @classmethod
        def get_connector_class(cls, kv_transfer_config):
            name = kv_transfer_config.kv_connector
            if name in cls._registry:
                return cls._registry[name]()
            import importlib

            module = importlib.import_module(kv_transfer_config.kv_connector_module_path)
            return getattr(module, name)

    def ensure_kv_transfer_initialized(vllm_config, kv_cache_config=None):
        if vllm_config.kv_transfer_config is not None and state.agent is None:
            state.agent = KVConnectorFactory.create_connector(
                config=vllm_config, role=KVConnectorRole.WORKER, kv_cache_config=kv_cache_config
            )

    def get_kv_transfer_group():
        assert state.agent is not None
        return state.agent

    def has_kv_transfer_group():
        return state.agent is not None

    class KVConnectorModelRunnerMixin:
        @staticmethod
        def maybe_get_kv_connector_output(scheduler_output):
            if has_kv_transfer_group():
                return KVConnectorModelRunnerMixin._get_kv_connector_output(scheduler_output)
            return _null()

        @staticmethod
        @contextmanager
        def _get_kv_connector_output(scheduler_output, wait_for_save=True):
            output = KVConnectorOutput()
            kv_connector = get_kv_transfer_group()
            assert isinstance(kv_connector, KVConnectorBase_V1)
            assert scheduler_output.kv_connector_metadata is not None
            kv_connector.bind_connector_metadata(scheduler_output.kv_connector_metadata)
            kv_connector.start_load_kv(None)
            try:
                yield output
            finally:
                if wait_for_save:
                    kv_connector.wait_for_save()
                output.finished_sending, output.finished_recving = (
                    kv_connector.get_finished(scheduler_output.finished_req_ids)
                )
                output.invalid_block_ids = kv_connector.get_block_ids_with_load_errors()
                kv_connector.clear_connector_metadata()

    class ModelRunner(KVConnectorModelRunnerMixin):
        def __init__(self, vllm_config):
            self.vllm_config = vllm_config

        def execute_model(self, scheduler_output):
            t = self.vllm_config.timings
            with self.maybe_get_kv_connector_output(scheduler_output) as kv_out:
                t0 = perf()
                spin(t.execute)
                t.note("execute", perf() - t0)
            # Sampling is deferred to sample_tokens(): execute_model returns None.
            self._pending = ModelRunnerOutput(
                req_ids=list(scheduler_output.num_scheduled_tokens), kv_connector_output=kv_out
            )
            return None

        def sample_tokens(self, grammar_output):
            out, self._pending = self._pending, None
            return out

    class Executor:
        def __init__(self, vllm_config):
            self.vllm_config = vllm_config
            ensure_kv_transfer_initialized(vllm_config)
            self.runner = ModelRunner(vllm_config)
            self._pool = ThreadPoolExecutor(1)

        @property
        def max_concurrent_batches(self):
            return self.vllm_config.max_concurrent_batches

        def execute_model(self, scheduler_output, non_block=False):
            if non_block:
                return self._pool.submit(self.runner.execute_model, scheduler_output)
            return self.runner.execute_model(scheduler_output)

        def sample_tokens(self, grammar_output, non_block=False):
            if non_block:
                return self._pool.submit(self.runner.sample_tokens, grammar_output)
            return self.runner.sample_tokens(grammar_output)

    class Scheduler:
        def __init__(
            self,
            vllm_config,
            kv_cache_config=None,
            structured_output_manager=None,
            block_size=16,
            mm_registry=None,
            include_finished_set=False,
            log_stats=False,
        ):
            self.vllm_config = vllm_config
            self.connector = None
            if vllm_config.kv_transfer_config is not None:
                self.connector = KVConnectorFactory.create_connector(
                    config=vllm_config,
                    role=KVConnectorRole.SCHEDULER,
                    kv_cache_config=kv_cache_config,
                )
            self.running = [object()] * vllm_config.decode
            self.waiting = deque([object()])
            self.steps = 0

        def has_requests(self):
            return True

        def schedule(self):
            t = self.vllm_config.timings
            t0 = perf()
            spin(t.schedule)
            scheduler_output = make_scheduler_output(self.vllm_config, self.steps)
            self.steps += 1
            if self.connector is not None:
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

    class EngineCore:
        def __init__(
            self,
            vllm_config,
            executor_class,
            log_stats,
            executor_fail_callback=None,
            include_finished_set=False,
        ):
            from vllm.plugins import load_general_plugins

            load_general_plugins()
            self.vllm_config = vllm_config
            self.model_executor = executor_class(vllm_config)
            self.scheduler = Scheduler(vllm_config=vllm_config, log_stats=log_stats)
            self.batch_queue_size = self.model_executor.max_concurrent_batches
            self.batch_queue = None
            if self.batch_queue_size > 1:
                self.batch_queue = deque(maxlen=self.batch_queue_size)
            self.is_pooling_model = False
            self.step_fn = self.step if self.batch_queue is None else self.step_with_batch_queue
            self.async_scheduling = vllm_config.async_scheduling
            self.aborts_queue = queue.Queue()

        @contextmanager
        def log_error_detail(self, scheduler_output):
            try:
                yield
            except Exception:
                raise

        def _process_aborts_queue(self):
            if not self.aborts_queue.empty():
                self.aborts_queue.get_nowait()

        def step(self):
            if not self.scheduler.has_requests():
                return {}, False
            scheduler_output = self.scheduler.schedule()
            future = self.model_executor.execute_model(scheduler_output, non_block=True)
            grammar_output = self.scheduler.get_grammar_bitmask(scheduler_output)
            with self.log_error_detail(scheduler_output):
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
            if self.scheduler.has_requests():
                scheduler_output = self.scheduler.schedule()
                with self.log_error_detail(scheduler_output):
                    exec_future = self.model_executor.execute_model(
                        scheduler_output, non_block=True
                    )
                model_executed = scheduler_output.total_num_scheduled_tokens > 0
                if self.is_pooling_model or not model_executed:
                    future = exec_future
                else:
                    grammar_output = self.scheduler.get_grammar_bitmask(scheduler_output)
                    future = self.model_executor.sample_tokens(grammar_output, non_block=True)
                batch_queue.appendleft((future, scheduler_output, exec_future))
                if len(batch_queue) < self.batch_queue_size and (
                    model_executed or self.scheduler.has_requests()
                ):
                    return None, model_executed
            elif not batch_queue:
                return None, False
            future, scheduler_output, exec_model_fut = batch_queue.pop()
            with self.log_error_detail(scheduler_output):
                model_output = future.result()
                if model_output is None:
                    exec_model_fut.result()
                    raise RuntimeError("unexpected error")
            self._process_aborts_queue()
            engine_core_outputs = self.scheduler.update_from_output(scheduler_output, model_output)
            return engine_core_outputs, model_executed

    return SimpleNamespace(
        version=VERSION,
        plugins=plugins,
        state=state,
        KVConnectorRole=KVConnectorRole,
        KVConnectorMetadata=KVConnectorMetadata,
        KVConnectorBase_V1=KVConnectorBase_V1,
        SlowConnector=SlowConnector,
        KVConnectorFactory=KVConnectorFactory,
        KVConnectorModelRunnerMixin=KVConnectorModelRunnerMixin,
        ModelRunner=ModelRunner,
        Executor=Executor,
        Scheduler=Scheduler,
        EngineCore=EngineCore,
        ensure_kv_transfer_initialized=ensure_kv_transfer_initialized,
    )


@contextmanager
def _null():
    yield None
