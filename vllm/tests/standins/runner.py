"""The worker side of vLLM's V1 engine, as both pinned versions run it in
the engine process with the in-process executor (UniProcExecutor), on a
fake GPU (fakegpu.py) — identical in control flow at both pins:

* ``WorkerWrapperBase`` (vllm/v1/worker/worker_base.py@65b2f405 for 0.18.1,
  @ebfbcfe4 for main): ``init_worker`` loads the general plugins
  (L232-L234 / L247) and builds the worker (L300 / L319); attributes it
  lacks come from the worker (``__getattr__``, L314 / L333).
* ``Worker`` (gpu_worker.py@f63ed7b5 / @a367cdbc): ``execute_model`` calls
  ``model_runner.execute_model(scheduler_output, intermediate_tensors)``
  (L819 / L1086), ``sample_tokens`` calls the runner's (L753 / L1019).
* ``GPUModelRunner`` (gpu_model_runner.py@8a680463 / @95c91444):
  ``execute_model`` (L3562 / L4278) prepares inputs on the CPU, then inside
  ``maybe_get_kv_connector_output(scheduler_output)`` (the connector mixin,
  L3807 / L4549) calls ``_model_forward`` (L3812 / L4554), the one call of
  ``self.model(...)`` for a real batch (L3283 / L3946); it keeps the state
  and returns None. ``sample_tokens`` (L3895 / L4657) samples and, without
  async scheduling, returns the output after a blocking copy (L4103 /
  L4887), else an ``AsyncGPUModelRunnerOutput`` (L4109 / L4917): a copy on
  another stream that waits for the default stream, then records an event
  (L219-L253 / L290-L344); ``get_output()`` blocks on that event
  (L261 / L352).

The "model" is ``Timings``: ``execute`` ns of CPU input preparation, a
forward of ``kernels`` kernels of ``gpu / kernels`` ns each, launched with
``launch`` ns of CPU each, and a sampler kernel of ``sample_gpu`` ns. The
device logs every kernel with the batch it belongs to (the profiler's
truth); ``Timings.truth`` gets the stand-ins' own CPU measurements.
"""

from __future__ import annotations

from contextlib import contextmanager

from . import fakegpu
from .common import ModelRunnerOutput, perf, spin



def run_method(obj, method, args, kwargs):
    """vllm/v1/serial_utils.py@7afe0faa L435-L459 (the str case)."""
    try:
        func = getattr(obj, method)
    except AttributeError:
        raise NotImplementedError(f"Method {method!r} is not implemented.") from None
    return func(*args, **kwargs)


class AsyncGPUModelRunnerOutput:
    """gpu_model_runner.py AsyncGPUModelRunnerOutput: the copy event."""

    is_async = True

    def __init__(self, model_runner_output, timings):
        self._model_runner_output = model_runner_output
        self._t = timings
        # Waits for the default stream, then copies and records: the event
        # completes when the batch's kernels have.
        self.async_copy_ready_event = fakegpu.Event()
        self.async_copy_ready_event.record()

    def get_output(self):
        t0 = perf()
        self.async_copy_ready_event.synchronize()
        self._t.note("gpu_wait", perf() - t0)
        return self._model_runner_output


class GPUModelRunner:
    """The V1 runner's control flow (see the module doc)."""

    def __init__(self, vllm_config, mixin):
        self.vllm_config = vllm_config
        self.mixin = mixin
        self.use_async_scheduling = vllm_config.async_scheduling
        self.execute_model_state = None

    def maybe_get_kv_connector_output(self, scheduler_output):
        return self.mixin.maybe_get_kv_connector_output(scheduler_output)

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        if self.execute_model_state is not None:
            raise RuntimeError("State error: sample_tokens() must be called after execute_model() returns None.")
        t = self.vllm_config.timings
        t0 = perf()
        spin(t.execute)  # preparing the inputs on the CPU
        t.note("execute", perf() - t0)
        with self.maybe_get_kv_connector_output(scheduler_output) as kv_connector_output:
            self._model_forward(scheduler_output)
        self.execute_model_state = (scheduler_output, kv_connector_output)
        return None

    def _model_forward(self, scheduler_output=None, **model_kwargs):
        """self.model(...): the forward's kernels, launched one by one."""
        t = self.vllm_config.timings
        dev = fakegpu.device() if t.gpu else None
        tag = getattr(scheduler_output, "standin_step", None)  # the profiler's label
        gpu = t.gpu
        if t.gpu_vary and tag is not None:
            gpu = gpu * (4 + tag % 4) // 4
        n = max(1, t.kernels)
        for _ in range(n):
            spin(t.launch)
            if dev is not None:
                dev.launch(gpu // n, tag)
        return None

    def sample_tokens(self, grammar_output):
        if self.execute_model_state is None:
            return None
        scheduler_output, kv_connector_output = self.execute_model_state
        self.execute_model_state = None
        t = self.vllm_config.timings
        if t.gpu:
            fakegpu.device().launch(t.sample_gpu, ("sample", scheduler_output.standin_step))
        output = ModelRunnerOutput(req_ids=list(scheduler_output.num_scheduled_tokens),
                                   kv_connector_output=kv_connector_output)
        if not self.use_async_scheduling:
            if t.gpu:  # the blocking copy of the sampled tokens
                AsyncGPUModelRunnerOutput(output, t).get_output()
            return output
        return AsyncGPUModelRunnerOutput(output, t)


class Worker:
    def __init__(self, vllm_config, mixin, ensure_kv_transfer_initialized, runner_cls):
        ensure_kv_transfer_initialized(vllm_config)
        self.model_runner = runner_cls(vllm_config, mixin)


    def execute_model(self, scheduler_output):
        return self.model_runner.execute_model(scheduler_output, None)

    def sample_tokens(self, grammar_output):
        return self.model_runner.sample_tokens(grammar_output)


# The runner a stand-in set builds on: this fake-GPU one, or a subclass
# that runs a real model (gpu/steptimer/h200_proof.py).
RUNNER_BASE = None


def fresh_runner_class():
    """A GPUModelRunner class of its own for one stand-in set (the plugin
    patches the class an engine uses; nothing leaks between sets)."""
    return type("GPUModelRunner", (RUNNER_BASE or GPUModelRunner,), {})


class WorkerWrapperBase:
    def __init__(self, rpc_rank=0):
        self.rpc_rank = rpc_rank
        self.worker = None

    def init_worker(self, plugins, make_worker):
        plugins.load_general_plugins()
        self.worker = make_worker()

    def __getattr__(self, attr):
        if attr == "worker":
            raise AttributeError(attr)
        return getattr(self.worker, attr)

    def execute_model(self, scheduler_output):
        return self.worker.execute_model(scheduler_output)


def make_mixin(state, KVConnectorOutput, use_transfer_results: bool):
    """KVConnectorModelRunnerMixin._get_kv_connector_output.

    0.18.1 (kv_connector_model_runner_mixin.py@ca1954d5 L95-L120):
    bind_connector_metadata, start_load_kv, yield, wait_for_save, then
    ``get_finished(finished_req_ids)`` (L120). Main as the index holds it
    (@00f4240e L67-L94): start_load_kv after the forward unless the batch
    has sync KV loads (L83-L90), wait_for_save, then
    ``get_transfer_results(finished_req_ids)`` (L94)."""

    class Mixin:
        @staticmethod
        def maybe_get_kv_connector_output(scheduler_output):
            if state.agent is not None:
                return Mixin._get_kv_connector_output(scheduler_output)
            return _null()

        @staticmethod
        @contextmanager
        def _get_kv_connector_output(scheduler_output, wait_for_save=True):
            output = KVConnectorOutput()
            kv_connector = state.agent
            assert scheduler_output.kv_connector_metadata is not None
            kv_connector.bind_connector_metadata(scheduler_output.kv_connector_metadata)
            start_after_forward = use_transfer_results and not getattr(scheduler_output, "has_sync_kv_loads", False)
            if not start_after_forward:
                kv_connector.start_load_kv(None)
            try:
                yield output
            finally:
                if start_after_forward:
                    kv_connector.start_load_kv(None)
                if wait_for_save:
                    kv_connector.wait_for_save()
                if use_transfer_results:
                    res = kv_connector.get_transfer_results(scheduler_output.finished_req_ids)
                    output.finished_sending, output.finished_recving = res
                else:
                    output.finished_sending, output.finished_recving = kv_connector.get_finished(
                        scheduler_output.finished_req_ids)
                output.invalid_block_ids = kv_connector.get_block_ids_with_load_errors()
                kv_connector.clear_connector_metadata()

    return Mixin


@contextmanager
def _null():
    yield None
