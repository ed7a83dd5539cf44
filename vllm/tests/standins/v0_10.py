"""Stand-ins for vLLM 0.10.x (pinned: v0.10.2, tag commit
01efc7ef781391e744ed08c3292817a773d654e6).

Sources read (method names, signatures, call order):

* vllm/v1/engine/core.py — ``EngineCore.step`` at v0.10.2 (lines 287-299 of
  the file at 01efc7ef, quoted verbatim in a public study note): has_requests
  → schedule() → execute_model_with_error_logging(model_executor.execute_model,
  scheduler_output) → update_from_output(scheduler_output, model_output).
  ``step_with_batch_queue`` (0.10.x, core.py:308-359 as quoted in a public
  design note): schedule → execute_model → batch_queue.appendleft((future,
  scheduler_output)) → early ``return None, True`` while the queue is not
  full → pop → execute_model_with_error_logging(lambda _: future.result(), …)
  → update_from_output. ``__init__(vllm_config, executor_class, log_stats,
  executor_fail_callback=None)`` calls ``load_general_plugins()`` first and
  binds ``self.step_fn = self.step if self.batch_queue is None else
  self.step_with_batch_queue`` last.
* vllm/distributed/kv_transfer/kv_connector/factory.py at
  vllm-project/vllm@007c643b4abb7a79e69ef2b343b3dc80eb643c0d (0.10 line: still
  checks VLLM_USE_V1): ``create_connector(cls, config, role)`` →
  ``connector_cls(config, role)``; classes from a registry or
  ``kv_connector_module_path``.
* vllm/distributed/kv_transfer/kv_connector/v1/base.py, 0.10 line (rendered
  source on the vllm PR-25741 docs build, Sep 2025):
  ``KVConnectorBase_V1.__init__(self, vllm_config, role)``; abstract
  start_load_kv, wait_for_layer_load, save_kv_layer, wait_for_save,
  get_num_new_matched_tokens, update_state_after_alloc, build_connector_meta;
  get_finished → (None, None) and request_finished → (False, None) defaults.
* vllm/v1/core/sched/scheduler.py, 0.10 line: ``schedule(self)`` builds the
  SchedulerOutput, then inline ``meta = self.connector.build_connector_meta(
  scheduler_output)`` (no ``_build_kv_connector_meta`` yet);
  ``update_from_output(self, scheduler_output, model_runner_output)``.
* vllm/v1/worker/kv_connector_model_runner_mixin.py, 0.10 line
  (reconstructed): static methods reach the worker connector through
  ``get_kv_transfer_group()`` and call ``.get_finished(
  scheduler_output.finished_req_ids)`` after the forward.
"""

from __future__ import annotations

import enum
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

VERSION = "0.10.2"
COMMIT = "01efc7ef781391e744ed08c3292817a773d654e6"


def make():
    """Fresh stand-in classes (a new set per call, so patches never leak)."""
    plugins = make_plugins_module()
    state = SimpleNamespace(agent=None)

    class KVConnectorRole(enum.Enum):
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata(ABC):  # noqa: B024
        pass

    class KVConnectorBase_V1(ABC):
        def __init__(self, vllm_config, role):
            self._connector_metadata = None
            self._vllm_config = vllm_config
            self._role = role

        @property
        def role(self):
            return self._role

        def bind_connector_metadata(self, connector_metadata):
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self):
            self._connector_metadata = None

        def register_kv_caches(self, kv_caches):
            return

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
        """A connector with injected costs, overriding get_finished like Mooncake."""

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
        def create_connector(cls, config, role):
            connector_cls = cls.get_connector_class(config.kv_transfer_config)
            return connector_cls(config, role)

        @classmethod
        def get_connector_class(cls, kv_transfer_config):
            name = kv_transfer_config.kv_connector
            if name in cls._registry:
                return cls._registry[name]()
            import importlib

            module = importlib.import_module(kv_transfer_config.kv_connector_module_path)
            return getattr(module, name)

    def ensure_kv_transfer_initialized(vllm_config):
        if vllm_config.kv_transfer_config is not None and state.agent is None:
            state.agent = KVConnectorFactory.create_connector(
                config=vllm_config, role=KVConnectorRole.WORKER
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
            return ModelRunnerOutput(
                req_ids=list(scheduler_output.num_scheduled_tokens), kv_connector_output=kv_out
            )

    class Executor:
        """UniProcExecutor-like: the worker lives in this process."""

        def __init__(self, vllm_config):
            self.vllm_config = vllm_config
            ensure_kv_transfer_initialized(vllm_config)
            self.runner = ModelRunner(vllm_config)
            self._pool = ThreadPoolExecutor(1) if vllm_config.async_scheduling else None

        @property
        def max_concurrent_batches(self):
            return self.vllm_config.max_concurrent_batches

        def execute_model(self, scheduler_output):
            if self._pool is not None:
                return self._pool.submit(self.runner.execute_model, scheduler_output)
            return self.runner.execute_model(scheduler_output)

    class Scheduler:
        def __init__(
            self,
            vllm_config,
            kv_cache_config=None,
            structured_output_manager=None,
            mm_registry=None,
            include_finished_set=False,
            log_stats=False,
        ):
            self.vllm_config = vllm_config
            self.connector = None
            if vllm_config.kv_transfer_config is not None:
                self.connector = KVConnectorFactory.create_connector(
                    config=vllm_config, role=KVConnectorRole.SCHEDULER
                )
            self.running = [object()] * vllm_config.decode
            self.waiting = deque([object(), object()])
            self.steps = 0

        def has_requests(self):
            return True

        def schedule(self):
            t = self.vllm_config.timings
            t0 = perf()
            spin(t.schedule)
            scheduler_output = make_scheduler_output(self.vllm_config, self.steps)
            self.steps += 1
            # NOTE(Kuntai): this function is designed for multiple purposes: ...
            if self.connector is not None:
                meta = self.connector.build_connector_meta(scheduler_output)
                scheduler_output.kv_connector_metadata = meta
            t.note("schedule", perf() - t0)
            return scheduler_output

        def update_from_output(self, scheduler_output, model_runner_output):
            t = self.vllm_config.timings
            t0 = perf()
            spin(t.update)
            t.note("update", perf() - t0)
            return {0: model_runner_output}

    class EngineCore:
        def __init__(self, vllm_config, executor_class, log_stats, executor_fail_callback=None):
            from vllm.plugins import load_general_plugins

            load_general_plugins()
            self.vllm_config = vllm_config
            self.model_executor = executor_class(vllm_config)
            self.scheduler = Scheduler(vllm_config=vllm_config, log_stats=log_stats)
            self.batch_queue_size = self.model_executor.max_concurrent_batches
            self.batch_queue = None
            if self.batch_queue_size > 1:
                self.batch_queue = deque(maxlen=self.batch_queue_size)
            self.step_fn = self.step if self.batch_queue is None else self.step_with_batch_queue

        def execute_model_with_error_logging(self, model_fn, scheduler_output):
            try:
                return model_fn(scheduler_output)
            except Exception:
                raise

        def step(self):
            if not self.scheduler.has_requests():
                return {}, False
            scheduler_output = self.scheduler.schedule()
            model_output = self.execute_model_with_error_logging(
                self.model_executor.execute_model, scheduler_output
            )
            engine_core_outputs = self.scheduler.update_from_output(scheduler_output, model_output)
            return (engine_core_outputs, scheduler_output.total_num_scheduled_tokens > 0)

        def step_with_batch_queue(self):
            batch_queue = self.batch_queue
            assert batch_queue is not None
            assert len(batch_queue) < self.batch_queue_size
            model_executed = False
            if self.scheduler.has_requests():
                scheduler_output = self.scheduler.schedule()
                future = self.model_executor.execute_model(scheduler_output)
                batch_queue.appendleft((future, scheduler_output))
                model_executed = scheduler_output.total_num_scheduled_tokens > 0
                if (
                    model_executed
                    and len(batch_queue) < self.batch_queue_size
                    and not batch_queue[-1][0].done()
                ):
                    return None, True
            elif not batch_queue:
                return None, False
            future, scheduler_output = batch_queue.pop()
            model_output = self.execute_model_with_error_logging(
                lambda _: future.result(), scheduler_output
            )
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
        Future=Future,
    )


@contextmanager
def _null():
    yield None
