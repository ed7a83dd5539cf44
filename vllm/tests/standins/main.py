"""Stand-ins for vLLM main, where it differs from 0.18.x (built on v0_18).

Sources read (vllm-project/vllm, the stored revision of each file; line
numbers are of that revision):

* vllm/v1/engine/core.py @ ac3cb2e2eca80290181abb9365d572af6d287473:
  ``EngineCore.__init__`` calls ``load_general_plugins()`` first (L94),
  builds the executor (L107), takes the scheduler class from
  ``scheduler_config.get_scheduler_cls()`` (L125) and instantiates it
  (L140) -- after the plugins -- and binds ``step_fn`` last.
  ``step()``: schedule -> ``execute_model(non_block=True)`` ->
  ``get_grammar_bitmask`` -> ``future.result()`` and, when it returned None,
  a blocking ``sample_tokens(grammar_output)`` -> aborts -> update.
  ``step_with_batch_queue()``: schedule -> ``execute_model(non_block=True)``
  -> unless ``pending_structured_output_tokens`` (then sampling is deferred)
  ``sample_tokens(grammar_output, non_block=True)`` -> ``appendleft`` ->
  early ``return None, True`` only while the queue is not full and the
  oldest batch is not ``done()`` -> pop -> ``future.result()`` -> aborts ->
  ``update_from_output`` -> the deferred ``sample_tokens`` and its
  ``appendleft``.
* vllm/v1/executor/uniproc_executor.py (stored revision 0b940c49; the
  methods at L108-L131): ``execute_model`` / ``sample_tokens`` go through
  ``collective_rpc(..., non_block, single_value=True)``, which runs the
  worker method *inline* on the engine thread; with ``non_block`` an
  ``AsyncModelRunnerOutput`` comes back as a future whose ``result()``
  calls ``get_output()`` (the blocking copy of the sampled tokens), other
  results as an already completed ``Future``. Here the GPU is simulated: a
  batch's kernels queue behind the previous batch's and complete
  ``Timings.gpu`` later; ``get_output()`` blocks until then.
* vllm/distributed/kv_transfer/kv_connector/factory.py @
  a4cd9d0d28bdb41db8dfe0acdafac2bf2f608630: ``create_connector(cls, config,
  role, kv_cache_config=None)`` (L43) raises without a
  ``kv_transfer_config``, raises when the hybrid KV cache manager is on and
  the class is not ``SupportsHMA`` (L56-L62), and calls ``cls(config,
  role)`` when ``supports_kw(connector_cls, "kv_cache_config")`` is false
  (``_get_connector_class_with_compat``), else ``cls(config, role,
  kv_cache_config)``.
* vllm/distributed/kv_transfer/kv_connector/v1/base.py (main):
  ``SupportsHMA`` (L85, abstract ``request_finished_all_groups``, L93);
  ``KVConnectorBase_V1.__init__(self, vllm_config, role, kv_cache_config)``
  -- required.
* vllm/v1/worker/kv_connector_model_runner_mixin.py @
  23ec7c7fab7aa8edb1c14195c048113e210683fa: ``_get_kv_connector_output``
  (L108-L141) calls ``kv_connector.get_finished(scheduler_output.
  finished_req_ids)`` (L131) on ``get_kv_transfer_group()`` after the
  forward.
* vllm/config/scheduler.py (main, reconstructed, not read at a pinned
  commit): ``SchedulerConfig.async_scheduling: bool | None = None`` -- None
  lets vLLM turn it on at start-up where supported (the default since v0.14).
* ``vllm.utils.func_utils.supports_kw``: true when the parameter exists as
  positional-or-keyword / keyword-only, or the callable takes ``**kwargs``.
"""

from __future__ import annotations

import inspect
import queue
from collections import deque
from concurrent.futures import Future
from contextlib import contextmanager
from types import SimpleNamespace

from . import v0_18
from .common import KVConnectorOutput, ModelRunnerOutput, make_scheduler_output, perf, spin

VERSION = "0.19.0.dev0+main"


def supports_kw(fn, kw_name: str) -> bool:
    params = inspect.signature(fn).parameters
    p = params.get(kw_name)
    if p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
        return True
    return any(q.kind is q.VAR_KEYWORD for q in params.values())


def make():
    ns = v0_18.make()
    Base18, Role = ns.KVConnectorBase_V1, ns.KVConnectorRole
    from abc import ABC, abstractmethod

    class SupportsHMA(ABC):
        @abstractmethod
        def request_finished_all_groups(self, request, block_ids): ...

    def supports_hma(connector) -> bool:
        if isinstance(connector, type):
            return issubclass(connector, SupportsHMA)
        return isinstance(connector, SupportsHMA)

    class KVConnectorBase_V1(Base18):
        def __init__(self, vllm_config, role, kv_cache_config):  # required on main
            super().__init__(vllm_config, role, kv_cache_config)

    class SlowConnector(KVConnectorBase_V1, ns.SlowConnector):
        pass

    class KVConnectorFactory:
        _registry = {"SlowConnector": lambda: SlowConnector}

        @classmethod
        def create_connector(cls, config, role, kv_cache_config=None):
            kv_transfer_config = config.kv_transfer_config
            if kv_transfer_config is None:
                raise ValueError("kv_transfer_config must be set to create a connector")
            connector_cls, compat_sig = cls._get_connector_class_with_compat(kv_transfer_config)
            hma_enabled = not config.scheduler_config.disable_hybrid_kv_cache_manager
            if hma_enabled and not supports_hma(connector_cls):
                raise ValueError(
                    f"Connector {connector_cls.__name__} does not support HMA but "
                    "HMA is enabled. Please set `--disable-hybrid-kv-cache-manager`."
                )
            if compat_sig:
                return connector_cls(config, role)
            return connector_cls(config, role, kv_cache_config)

        @classmethod
        def _get_connector_class_with_compat(cls, kv_transfer_config):
            name = kv_transfer_config.kv_connector
            if name is None:
                raise ValueError("Connector name is not set in KVTransferConfig")
            if name in cls._registry:
                return cls._registry[name](), False
            if kv_transfer_config.kv_connector_module_path is None:
                raise ValueError(f"Unsupported connector type: {name}")
            import importlib

            module = importlib.import_module(kv_transfer_config.kv_connector_module_path)
            connector_cls = getattr(module, name)
            return connector_cls, not supports_kw(connector_cls, "kv_cache_config")

        @classmethod
        def get_connector_class(cls, kv_transfer_config):
            return cls._get_connector_class_with_compat(kv_transfer_config)[0]

    state = ns.state

    def ensure_kv_transfer_initialized(vllm_config, kv_cache_config=None):
        if vllm_config.kv_transfer_config is not None and state.agent is None:
            state.agent = KVConnectorFactory.create_connector(
                config=vllm_config, role=Role.WORKER, kv_cache_config=kv_cache_config
            )

    class KVConnectorModelRunnerMixin:
        @staticmethod
        def maybe_get_kv_connector_output(scheduler_output):
            if state.agent is not None:
                return KVConnectorModelRunnerMixin._get_kv_connector_output(scheduler_output)
            return v0_18._null()

        @staticmethod
        @contextmanager
        def _get_kv_connector_output(scheduler_output, wait_for_save=True):
            output = KVConnectorOutput()
            kv_connector = state.agent
            assert isinstance(kv_connector, KVConnectorBase_V1)
            assert scheduler_output.kv_connector_metadata is not None
            kv_connector.bind_connector_metadata(scheduler_output.kv_connector_metadata)
            kv_connector.start_load_kv(None)
            try:
                yield output
            finally:
                if wait_for_save:
                    kv_connector.wait_for_save()
                output.finished_sending, output.finished_recving = kv_connector.get_finished(
                    scheduler_output.finished_req_ids
                )
                output.invalid_block_ids = kv_connector.get_block_ids_with_load_errors()
                kv_connector.clear_connector_metadata()

    class GPU:
        """One CUDA stream: batches run back to back, each Timings.gpu long."""

        def __init__(self):
            self.free_at = 0

        def enqueue(self, ns_: int) -> int:
            start = max(perf(), self.free_at)
            self.free_at = start + ns_
            return self.free_at

    class AsyncModelRunnerOutput:
        def __init__(self, output, done_at, timings):
            self._output, self._done_at, self._t = output, done_at, timings

        def get_output(self):
            t0 = perf()
            while perf() < self._done_at:  # the device-to-host copy blocks
                pass
            self._t.note("gpu_wait", perf() - t0)
            return self._output

    class ModelRunner(KVConnectorModelRunnerMixin):
        def __init__(self, vllm_config):
            self.vllm_config = vllm_config
            self.gpu = GPU()
            self._pending = None

        def execute_model(self, scheduler_output):
            t = self.vllm_config.timings
            with self.maybe_get_kv_connector_output(scheduler_output) as kv_out:
                t0 = perf()
                spin(t.execute)  # the CPU side: preparing inputs, launching kernels
                t.note("execute", perf() - t0)
                done_at = self.gpu.enqueue(t.gpu)
            self._pending = (
                ModelRunnerOutput(
                    req_ids=list(scheduler_output.num_scheduled_tokens), kv_connector_output=kv_out
                ),
                done_at,
            )
            return None  # sampling follows in sample_tokens()

        def sample_tokens(self, grammar_output):
            (out, done_at), self._pending = self._pending, None
            if not self.vllm_config.async_scheduling:
                AsyncModelRunnerOutput(out, done_at, self.vllm_config.timings).get_output()
                return out
            return AsyncModelRunnerOutput(out, done_at, self.vllm_config.timings)

    class AsyncOutputFuture(Future):
        def __init__(self, async_output):
            super().__init__()
            self._async = async_output

        def result(self, timeout=None):
            if not self.done():
                self.set_result(self._async.get_output())
            return super().result(timeout)

    class UniProcExecutor:
        """Runs the worker's methods inline on the engine thread."""

        def __init__(self, vllm_config):
            self.vllm_config = vllm_config
            ensure_kv_transfer_initialized(vllm_config, kv_cache_config="kvcfg")
            self.runner = ModelRunner(vllm_config)

        @property
        def max_concurrent_batches(self):
            return self.vllm_config.max_concurrent_batches

        def collective_rpc(self, method, args=(), non_block=False, single_value=False):
            if not non_block:
                result = getattr(self.runner, method)(*args)
                if isinstance(result, AsyncModelRunnerOutput):
                    result = result.get_output()
                return result
            try:
                result = getattr(self.runner, method)(*args)
                if isinstance(result, AsyncModelRunnerOutput):
                    return AsyncOutputFuture(result)
                future = Future()
                future.set_result(result)
            except Exception as e:
                future = Future()
                future.set_exception(e)
            return future

        def execute_model(self, scheduler_output, non_block=False):
            output = self.collective_rpc(
                "execute_model", args=(scheduler_output,), non_block=non_block, single_value=True
            )
            if non_block and output.done():
                output.result()
            return output

        def sample_tokens(self, grammar_output, non_block=False):
            return self.collective_rpc(
                "sample_tokens", args=(grammar_output,), non_block=non_block, single_value=True
            )

    def _worker_main(conn, vllm_config):
        """A worker process (forked): its own connector and model runner."""
        state.agent = None
        ensure_kv_transfer_initialized(vllm_config, kv_cache_config="kvcfg")
        runner = ModelRunner(vllm_config)
        while True:
            msg = conn.recv()
            if msg is None:
                break
            method, args = msg
            result = getattr(runner, method)(*args)
            if isinstance(result, AsyncModelRunnerOutput):
                result = result.get_output()
            conn.send(result)

    class _MPFuture(Future):
        def __init__(self, executor):
            super().__init__()
            self._ex = executor

        def result(self, timeout=None):
            while not self.done():
                f = self._ex.pending.popleft()
                replies = [c.recv() for c in self._ex.conns]
                Future.set_result(f, replies[0])
            return super().result(timeout)

    class MultiprocExecutor:
        """TP > 1: one process per rank; execute_model / sample_tokens send
        the call to every worker and return a future for the output rank's
        reply (multiproc_executor.py: collective_rpc(...,
        unique_reply_rank=self.output_rank, non_block=...)). Workers are
        forked here (vLLM spawns them and they load the plugins themselves;
        the forked/spawned scenarios cover both)."""

        def __init__(self, vllm_config):
            import multiprocessing as mp

            self.vllm_config = vllm_config
            ctx = mp.get_context("fork")
            self.conns, self.procs = [], []
            self.pending = deque()
            for _ in range(vllm_config.tp):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_worker_main, args=(child, vllm_config), daemon=True)
                p.start()
                self.conns.append(parent)
                self.procs.append(p)

        @property
        def max_concurrent_batches(self):
            return self.vllm_config.max_concurrent_batches

        def collective_rpc(self, method, args=(), non_block=False):
            # Replies come back in call order: resolving a future first
            # resolves every earlier one (vLLM's response queue is FIFO too).
            for c in self.conns:
                c.send((method, args))
            fut = _MPFuture(self)
            self.pending.append(fut)
            return fut if non_block else fut.result()

        def execute_model(self, scheduler_output, non_block=False):
            return self.collective_rpc("execute_model", (scheduler_output,), non_block)

        def sample_tokens(self, grammar_output, non_block=False):
            return self.collective_rpc("sample_tokens", (grammar_output,), non_block)

        def shutdown(self):
            for c in self.conns:
                c.send(None)
            for p in self.procs:
                p.join(timeout=10)

    class Scheduler(ns.Scheduler):
        def __init__(self, vllm_config, kv_cache_config=None, **kwargs):
            self.vllm_config = vllm_config
            self.connector = None
            if vllm_config.kv_transfer_config is not None:
                self.connector = KVConnectorFactory.create_connector(
                    config=vllm_config, role=Role.SCHEDULER, kv_cache_config=kv_cache_config
                )
            self.running = [object()] * vllm_config.decode
            self.waiting = deque([object()])
            self.steps = 0

        def _build_kv_connector_meta(self, connector, scheduler_output):
            return connector.build_connector_meta(scheduler_output)

        def schedule(self):
            t = self.vllm_config.timings
            t0 = perf()
            spin(t.schedule)
            scheduler_output = make_scheduler_output(self.vllm_config, self.steps)
            k = self.vllm_config.deferred_every
            scheduler_output.pending_structured_output_tokens = bool(k) and self.steps % k == k - 1
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
            scheduler_cls = vllm_config.scheduler_cls or Scheduler  # get_scheduler_cls()
            self.scheduler = scheduler_cls(vllm_config=vllm_config, kv_cache_config="kvcfg")
            self.use_spec_decode = False
            self.batch_queue_size = self.model_executor.max_concurrent_batches
            self.batch_queue = None
            if self.batch_queue_size > 1:
                self.batch_queue = deque(maxlen=self.batch_queue_size)
            self.is_ec_producer = False
            self.is_pooling_model = False
            self.step_fn = self.step if self.batch_queue is None else self.step_with_batch_queue
            self.async_scheduling = vllm_config.async_scheduling
            self.aborts_queue = queue.Queue()
            self._scheduler_paused = False

        @contextmanager
        def log_iteration_details(self, scheduler_output):
            yield

        def step(self):
            if self._scheduler_paused:
                return {}, False
            if not self.scheduler.has_requests():
                return {}, False
            scheduler_output = self.scheduler.schedule()
            future = self.model_executor.execute_model(scheduler_output, non_block=True)
            grammar_output = self.scheduler.get_grammar_bitmask(scheduler_output)
            with (
                self.log_error_detail(scheduler_output),
                self.log_iteration_details(scheduler_output),
            ):
                model_output = future.result()
                if model_output is None:
                    model_output = self.model_executor.sample_tokens(grammar_output)
            self._process_aborts_queue()
            engine_core_outputs = self.scheduler.update_from_output(scheduler_output, model_output)
            return engine_core_outputs, scheduler_output.total_num_scheduled_tokens > 0

        def step_with_batch_queue(self):
            if self._scheduler_paused:
                return {}, False
            batch_queue = self.batch_queue
            assert batch_queue is not None
            assert len(batch_queue) < self.batch_queue_size
            model_executed = False
            deferred_scheduler_output = None
            if self.scheduler.has_requests():
                scheduler_output = self.scheduler.schedule()
                exec_future = self.model_executor.execute_model(scheduler_output, non_block=True)
                if not self.is_ec_producer:
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
                    if (
                        model_executed
                        and len(batch_queue) < self.batch_queue_size
                        and not batch_queue[-1][0].done()
                    ):
                        return None, True
            elif not batch_queue:
                return None, False
            future, scheduler_output, exec_model_fut = batch_queue.pop()
            with (
                self.log_error_detail(scheduler_output),
                self.log_iteration_details(scheduler_output),
            ):
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

    from dataclasses import dataclass

    @dataclass
    class SchedulerConfig:
        async_scheduling: bool | None = None

    out = SimpleNamespace(**vars(ns))
    out.version = VERSION
    out.SchedulerConfig = SchedulerConfig
    out.SupportsHMA = SupportsHMA
    out.supports_hma = supports_hma
    out.KVConnectorBase_V1 = KVConnectorBase_V1
    out.SlowConnector = SlowConnector
    out.KVConnectorFactory = KVConnectorFactory
    out.KVConnectorModelRunnerMixin = KVConnectorModelRunnerMixin
    out.ModelRunner = ModelRunner
    out.Executor = UniProcExecutor
    out.UniProcExecutor = UniProcExecutor
    out.MultiprocExecutor = MultiprocExecutor
    out.Scheduler = Scheduler
    out.EngineCore = EngineCore
    out.ensure_kv_transfer_initialized = ensure_kv_transfer_initialized
    return out
