"""Stand-in for vLLM main where it differs from 0.18.1 (v0_18.py), with the
same fake GPU.

Pinned: vllm-project/vllm@6adad08767583f52eb4d2122111af0bf638ed5e6
(2026-08-14), read with ``git show`` from a snapshot with upstream's
history; line numbers are of the commit that last changed each file at or
before it. Cross-checked against the newest stored revisions the search
index holds (``read_file``): core.py @ 00080ee13c7a451fce071ccb8d0e94d395acf5a7
has the same ``step`` and ``step_with_batch_queue`` text; the model-runner
mixin there (@ 00f4240ee6458263d76cf51ca7901ce1350bb4d1) already calls
``get_transfer_results``, which this stand-in follows.

* vllm/v1/engine/core.py @ 396204230423b7cc6798300926b8fa30190d26a9:
  ``load_general_plugins()`` L118, the executor L133,
  ``get_scheduler_cls()`` L148, the scheduler L161,
  ``batch_queue_size = vllm_config.max_concurrent_batches`` L207,
  ``step_fn`` L232. ``step()`` L581: ``schedule(self._should_throttle_prefills())``
  L592 (never throttles outside the DP engine, L576-L579).
  ``step_with_batch_queue()`` L622: schedule L650, execute L652, sample L668,
  the early return ``len(batch_queue) < self.batch_queue_size and
  (model_executed or self.scheduler.has_requests())`` with no ``done()``
  check L681-L684, pop L693, ``future.result()`` L698, update L708, the
  deferred sample L733.
* vllm/config/vllm.py @ 7553aac7 ``max_concurrent_batches`` L547-L557: 2 with
  async scheduling (V1 runner, no PP).
* vllm/v1/executor/uniproc_executor.py @ 436be94e135fd07fc94e4c165a1b6870af72bf31:
  no thread pool; an ``AsyncModelRunnerOutput`` comes back as an
  ``AsyncOutputFuture`` (L32-L48) whose ``result()`` calls ``get_output()``
  inline on the caller's thread (L38-L48) — so it is never ``done()`` early;
  ``collective_rpc`` L90 (L105: blocking calls fetch the output, L111:
  non-blocking ones wrap it); ``execute_model`` L119 (``done()`` L129);
  ``sample_tokens`` L134.
* vllm/distributed/kv_transfer/kv_connector/factory.py @
  88ed63621866d1e4bdaacc560c911f7b8859c53d: ``create_connector(cls, config,
  role, kv_cache_config)`` L43-L75 (kv_cache_config required) builds
  ``connector_cls(config, role, kv_cache_config)`` (L75); HMA check via
  ``supports_hma_config`` (L56-L60, L131-L139); ``get_connector_class``
  L96-L128: the module path first (L105), and a class whose ``__init__``
  does not take ``kv_cache_config`` is refused (L115-L123).
* vllm/distributed/kv_transfer/kv_connector/v1/base.py @
  d6941300fcb9d4a8bbea19f8b610c2aff9fc5cc3: ``SupportsHMA`` L85;
  ``requires_kv_delivery`` L194-L203 (the producer role);
  ``__init__(vllm_config, role, kv_cache_config)`` L205, kv_cache_config
  required. ``get_transfer_results`` of the base: not read at a pinned
  commit (reconstructed: it wraps ``get_finished``, as connectors that only
  override ``get_finished`` need).
* vllm/v1/core/sched/scheduler.py @ f80b66f548d855a104c9b2a0527e6c0b1a31750c:
  ``schedule(self, throttle_prefills=False)`` L476 builds the metadata
  through ``self._build_kv_connector_meta(self.connector, scheduler_output)``
  (L1297-L1298, defined L1317-L1320).
* vllm/config/scheduler.py @ 7a98c7a3: ``async_scheduling: bool | None = None``
  L148 (a plain default on the pydantic dataclass).
* multiproc_executor.py @ 436be94e: ``FutureWrapper.result()`` drains the
  futures queued before it (0.18.1 @77a73458 L67-L93 has the same loop);
  workers reply in call order.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from concurrent.futures import Future
from types import SimpleNamespace

from . import runner as rn
from . import v0_18
from .common import KVConnectorOutput, make_plugins_module

VERSION = "0.19.0.dev0+g6adad087"
COMMIT = "6adad08767583f52eb4d2122111af0bf638ed5e6"


def make():
    plugins = make_plugins_module()
    state = SimpleNamespace(agent=None)
    cc = v0_18.make_connector_classes(base_init_requires_kv_cache_config=True)
    Role = cc.KVConnectorRole
    supports_kw = v0_18.supports_kw

    def get_transfer_results(self, finished_req_ids):  # base default (reconstructed)
        return self.get_finished(finished_req_ids)

    cc.KVConnectorBase_V1.get_transfer_results = get_transfer_results

    class KVConnectorFactory:
        _registry = {"SlowConnector": lambda: cc.SlowConnector}

        @classmethod
        def create_connector(cls, config, role, kv_cache_config):
            kv_transfer_config = config.kv_transfer_config
            if kv_transfer_config is None:
                raise ValueError("kv_transfer_config must be set to create a connector")
            connector_cls = cls.get_connector_class(kv_transfer_config)
            hma_enabled = not config.scheduler_config.disable_hybrid_kv_cache_manager
            if hma_enabled and not cls.supports_hma_config(kv_transfer_config):
                raise ValueError(
                    f"Connector {connector_cls.__name__} does not support HMA but "
                    "HMA is enabled. Please set `--disable-hybrid-kv-cache-manager`.")
            return connector_cls(config, role, kv_cache_config)

        @classmethod
        def get_connector_class(cls, kv_transfer_config):
            name = kv_transfer_config.kv_connector
            if name is None:
                raise ValueError("Connector name is not set in KVTransferConfig")
            path = kv_transfer_config.kv_connector_module_path
            if path is not None and not path:
                raise ValueError("kv_connector_module_path cannot be an empty string.")
            if path:
                import importlib

                connector_cls = getattr(importlib.import_module(path), name)
                if not supports_kw(connector_cls, "kv_cache_config"):
                    raise ValueError(
                        f"Connector {connector_cls.__name__} uses deprecated 2-argument constructor "
                        "signature. External v1 KV connectors must accept kv_cache_config as the third "
                        "constructor argument and pass it to super().__init__().")
            elif name in cls._registry:
                connector_cls = cls._registry[name]()
            else:
                raise ValueError(f"Unsupported connector type: {name}")
            return connector_cls

        @classmethod
        def supports_hma_config(cls, kv_transfer_config):
            return cc.supports_hma(cls.get_connector_class(kv_transfer_config))

    def ensure_kv_transfer_initialized(vllm_config, kv_cache_config="kvcfg"):
        if vllm_config.kv_transfer_config is not None and state.agent is None:
            state.agent = KVConnectorFactory.create_connector(
                config=vllm_config, role=Role.WORKER, kv_cache_config=kv_cache_config)

    runner_cls = rn.fresh_runner_class()
    mixin = rn.make_mixin(state, KVConnectorOutput, use_transfer_results=True)

    class AsyncOutputFuture(Future):
        def __init__(self, async_output, single_value):
            self.async_output = async_output
            self.single_value = single_value
            super().__init__()

        def result(self, timeout=None):
            if timeout is not None:
                raise RuntimeError("timeout not implemented")
            if not super().done():
                try:
                    output = self.async_output.get_output()
                    self.set_result(output if self.single_value else [output])
                except Exception as e:
                    self.set_exception(e)
            return super().result()

    class UniProcExecutor:
        def __init__(self, vllm_config):
            self.vllm_config = vllm_config
            self.driver_worker = rn.WorkerWrapperBase(rpc_rank=0)
            self.driver_worker.init_worker(
                plugins, lambda: rn.Worker(vllm_config, mixin, ensure_kv_transfer_initialized, runner_cls))

        @property
        def max_concurrent_batches(self):
            return self.vllm_config.max_concurrent_batches

        def collective_rpc(self, method, timeout=None, args=(), kwargs=None, non_block=False, single_value=False):
            if kwargs is None:
                kwargs = {}
            if not non_block:
                result = rn.run_method(self.driver_worker, method, args, kwargs)
                if getattr(result, "is_async", False):
                    result = result.get_output()
                return result if single_value else [result]
            try:
                result = rn.run_method(self.driver_worker, method, args, kwargs)
                if getattr(result, "is_async", False):
                    return AsyncOutputFuture(result, single_value)
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
            pass

    def _worker_main(conn, vllm_config):
        """A worker process (forked): its own connector, worker and runner."""
        state.agent = None
        w = rn.Worker(vllm_config, mixin, ensure_kv_transfer_initialized, runner_cls)
        while True:
            msg = conn.recv()
            if msg is None:
                break
            method, args = msg
            result = getattr(w, method)(*args)
            if getattr(result, "is_async", False):
                result = result.get_output()
            conn.send(result)

    class FutureWrapper(Future):
        def __init__(self, executor):
            super().__init__()
            self._ex = executor

        def result(self, timeout=None):
            while not self.done():  # drain the futures ahead of this one
                f = self._ex.pending.popleft()
                replies = [c.recv() for c in self._ex.conns]
                Future.set_result(f, replies[0])
            return super().result()

    class MultiprocExecutor:
        """TP > 1: a process per rank; execute_model / sample_tokens send the
        call to every worker and return a future for the output rank's reply.
        Workers are forked here (vLLM spawns them; they load the plugins)."""

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
            for c in self.conns:
                c.send((method, args))
            fut = FutureWrapper(self)
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

    Scheduler = v0_18.make_scheduler(KVConnectorFactory, Role, meta_via_method=True)

    @dataclasses.dataclass
    class SchedulerConfig:
        async_scheduling: bool | None = None

    EngineCore = v0_18.make_engine_core(plugins, Scheduler, early_return_checks_done=False,
                                        batch_queue_size_from_executor=False, throttle=True)
    return SimpleNamespace(
        version=VERSION, plugins=plugins, state=state, **vars(cc),
        KVConnectorFactory=KVConnectorFactory, KVConnectorModelRunnerMixin=mixin,
        Executor=UniProcExecutor, UniProcExecutor=UniProcExecutor, GPUModelRunner=runner_cls, MultiprocExecutor=MultiprocExecutor,
        Scheduler=Scheduler, EngineCore=EngineCore, SchedulerConfig=SchedulerConfig,
        ensure_kv_transfer_initialized=ensure_kv_transfer_initialized, supports_kw=supports_kw,
    )
