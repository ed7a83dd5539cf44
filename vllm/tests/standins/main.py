"""Stand-ins for vLLM main, where it differs from 0.18.x (built on v0_18).

Sources read (vllm-project/vllm, the stored revision of each file):

* vllm/v1/engine/core.py @ 00080ee13c7a451fce071ccb8d0e94d395acf5a7:
  ``EngineCore.__init__(vllm_config, executor_class, log_stats,
  executor_fail_callback=None, include_finished_set=False)`` calls
  ``load_general_plugins()`` first and binds ``step_fn`` last;
  ``batch_queue_size = vllm_config.max_concurrent_batches``; ``step()`` calls
  ``self.scheduler.schedule(self._should_throttle_prefills())`` and wraps the
  wait in ``capture_iteration_details`` + ``log_error_detail``;
  ``step_with_batch_queue()`` may defer sampling and, after
  ``update_from_output``, submit the deferred ``sample_tokens``.
* vllm/distributed/kv_transfer/kv_connector/v1/base.py @
  003df2961dd8830c317a61f9745ccd557da9fa06: ``__init__(self, vllm_config, role,
  kv_cache_config)`` — the third argument is required.
* vllm/v1/worker/kv_connector_model_runner_mixin.py @
  00f4240ee6458263d76cf51ca7901ce1350bb4d1: ``_get_kv_connector_output`` calls
  ``kv_connector.get_transfer_results(scheduler_output.finished_req_ids)`` on
  ``get_kv_transfer_group()`` (defined on the new ``kv_connector.base.
  KVConnectorBase``, not read; here it delegates to ``get_finished``).
* vllm/v1/core/sched/scheduler.py: the scheduler creates its connector with
  ``create_connector(config=..., role=SCHEDULER, kv_cache_config=...)``
  (@00024d31); newer main builds the metadata through
  ``Scheduler._build_kv_connector_meta(self, connector, scheduler_output)``
  (seen in public copies of the file; not in the stored upstream revision).
"""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

from . import v0_18
from .common import KVConnectorOutput, make_scheduler_output, perf, spin

VERSION = "0.19.0.dev0+main"


def make():
    ns = v0_18.make()
    Base18, Role = ns.KVConnectorBase_V1, ns.KVConnectorRole

    class KVConnectorBase_V1(Base18):
        def __init__(self, vllm_config, role, kv_cache_config):  # required on main
            super().__init__(vllm_config, role, kv_cache_config)

        def get_transfer_results(self, finished_req_ids):
            sending, recving = self.get_finished(finished_req_ids)
            return SimpleNamespace(
                finished_sending=sending, finished_recving=recving, failed_recving=None
            )

    class SlowConnector(KVConnectorBase_V1, ns.SlowConnector):
        pass

    class KVConnectorFactory:
        _registry = {"SlowConnector": lambda: SlowConnector}

        @classmethod
        def create_connector(cls, config, role, kv_cache_config):
            connector_cls = ns.KVConnectorFactory.get_connector_class.__func__(
                cls, config.kv_transfer_config
            )
            return connector_cls(config, role, kv_cache_config)

    state = ns.state

    def ensure_kv_transfer_initialized(vllm_config, kv_cache_config=None):
        if vllm_config.kv_transfer_config is not None and state.agent is None:
            state.agent = KVConnectorFactory.create_connector(
                config=vllm_config, role=Role.WORKER, kv_cache_config=kv_cache_config
            )

    class KVConnectorModelRunnerMixin:
        @staticmethod
        def maybe_get_kv_connector_output(scheduler_output, defer_finalize=False):
            if state.agent is not None:
                return KVConnectorModelRunnerMixin._get_kv_connector_output(scheduler_output)
            return v0_18._null()

        @staticmethod
        @contextmanager
        def _get_kv_connector_output(scheduler_output, defer_finalize=False):
            output = KVConnectorOutput()
            kv_connector = state.agent
            kv_connector.bind_connector_metadata(scheduler_output.kv_connector_metadata)
            try:
                yield output
            finally:
                kv_connector.start_load_kv(None)
                if not defer_finalize:
                    kv_connector.wait_for_save()
                res = kv_connector.get_transfer_results(scheduler_output.finished_req_ids)
                output.finished_sending = res.finished_sending
                output.finished_recving = res.finished_recving
                output.invalid_block_ids = kv_connector.get_block_ids_with_load_errors()
                if not defer_finalize:
                    kv_connector.clear_connector_metadata()

    class ModelRunner(KVConnectorModelRunnerMixin, ns.ModelRunner):
        pass

    class Executor(ns.Executor):
        def __init__(self, vllm_config):
            self.vllm_config = vllm_config
            ensure_kv_transfer_initialized(vllm_config, kv_cache_config="kvcfg")
            self.runner = ModelRunner(vllm_config)
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1)

    class Scheduler(ns.Scheduler):
        def __init__(self, vllm_config, kv_cache_config=None, **kwargs):
            self.vllm_config = vllm_config
            self.connector = None
            if vllm_config.kv_transfer_config is not None:
                self.connector = KVConnectorFactory.create_connector(
                    config=vllm_config, role=Role.SCHEDULER, kv_cache_config=kv_cache_config
                )
            self.running = [object()] * vllm_config.decode
            self.waiting = []
            self.steps = 0

        def _build_kv_connector_meta(self, connector, scheduler_output):
            return connector.build_connector_meta(scheduler_output)

        def schedule(self, throttle_prefills=False):
            t = self.vllm_config.timings
            t0 = perf()
            spin(t.schedule)
            scheduler_output = make_scheduler_output(self.vllm_config, self.steps)
            self.steps += 1
            if self.connector is not None:
                meta = self._build_kv_connector_meta(self.connector, scheduler_output)
                scheduler_output.kv_connector_metadata = meta
            t.note("schedule", perf() - t0)
            return scheduler_output

    class EngineCore(ns.EngineCore):
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
            self.scheduler = Scheduler(vllm_config=vllm_config, kv_cache_config="kvcfg")
            self.batch_queue_size = vllm_config.max_concurrent_batches
            self.batch_queue = None
            if self.batch_queue_size > 1:
                from collections import deque

                self.batch_queue = deque(maxlen=self.batch_queue_size)
            self.is_pooling_model = False
            import queue

            self.aborts_queue = queue.Queue()
            self.step_fn = self.step if self.batch_queue is None else self.step_with_batch_queue
            self.async_scheduling = vllm_config.async_scheduling

        def _should_throttle_prefills(self):
            return False

        @contextmanager
        def capture_iteration_details(self, scheduler_output):
            yield None

        def step(self):
            if not self.scheduler.has_requests():
                return {}, False
            scheduler_output = self.scheduler.schedule(self._should_throttle_prefills())
            future = self.model_executor.execute_model(scheduler_output, non_block=True)
            grammar_output = self.scheduler.get_grammar_bitmask(scheduler_output)
            with (
                self.capture_iteration_details(scheduler_output),
                self.log_error_detail(scheduler_output),
            ):
                model_output = future.result()
                if model_output is None:
                    model_output = self.model_executor.sample_tokens(grammar_output)
            self._process_aborts_queue()
            engine_core_outputs = self.scheduler.update_from_output(scheduler_output, model_output)
            return engine_core_outputs, scheduler_output.total_num_scheduled_tokens > 0

    out = SimpleNamespace(**vars(ns))
    out.version = VERSION
    out.KVConnectorBase_V1 = KVConnectorBase_V1
    out.SlowConnector = SlowConnector
    out.KVConnectorFactory = KVConnectorFactory
    out.KVConnectorModelRunnerMixin = KVConnectorModelRunnerMixin
    out.ModelRunner = ModelRunner
    out.Executor = Executor
    out.Scheduler = Scheduler
    out.EngineCore = EngineCore
    out.ensure_kv_transfer_initialized = ensure_kv_transfer_initialized
    return out
