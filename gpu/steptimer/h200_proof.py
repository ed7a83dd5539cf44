"""The H200 proof of gpu_us: the plugin's CUDA-event GPU time per batch
against the torch profiler's kernel time, on vLLM's step loop.

    PYTHONPATH=vllm:vllm/tests python3 gpu/steptimer/h200_proof.py --out DIR

The step loop is the transcription of vLLM's (vllm/tests/standins: v0.18.1
at a26e8dc7 and main at 6adad087, which cite the vLLM files: EngineCore's
step and step_with_batch_queue, UniProcExecutor — 0.18.1's one-thread
hand-off, main's inline AsyncOutputFuture —, the worker and
GPUModelRunner's execute_model / _model_forward / sample_tokens). Here its
GPUModelRunner runs a real model on the GPU: ``_model_forward`` is a chain
of bf16 matrix products (known kernels), inside
``torch.profiler.record_function("mbench_fwd_<batch>")``; sampling is an
argmax whose tokens are copied to the host like vLLM's
AsyncGPUModelRunnerOutput (a side stream that waits for the default one,
a non-blocking copy, an event; get_output() synchronizes on it).

The plugin (vllm/mbench_vllm) is loaded by EngineCore.__init__ exactly as
vLLM loads it, with MBENCH_STEP_LOG set; it brackets _model_forward with
CUDA events and writes gpu_us per step. The profiler records the whole
run; for every batch, its forward's kernel time is the device time of the
kernels under its record_function. Pass: the median over batches of
gpu_us / profiler kernel time within 5% of 1, with the 10th and 90th
percentiles and the share of batches within 5% reported beside it (the
events also hold any idle gap inside the forward: the host's delay before
the first kernel when the GPU is idle, which GIL contention can stretch on
some batches), for each of

  gpu_bound: 7 products of 4096x8192 @ 8192x8192 per forward (~5 ms of
             kernels), ~1 ms of engine-thread CPU per step;
  cpu_bound: 1 product of 6144x8192 @ 8192x8192 (~1 ms of kernels),
             ~6 ms of engine-thread CPU per step (GPU idle ~85%): wait_us
             is small, the step period is the CPU's, gpu_us still reads
             the forward;

on the batch-queue path (async scheduling) and the step() path, for both
pinned versions. It also measures the GPU timer's own cost on the engine
thread (two event records and a queue append per forward), as paired
chunks with the timer on and off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "vllm"), os.path.join(ROOT, "vllm", "tests")]

from standins import VERSIONS, fake_vllm  # noqa: E402
from standins import runner as rn  # noqa: E402
from standins.common import KVTransferConfig, Timings, VllmConfig, spin  # noqa: E402

US, MS = 1_000, 1_000_000
torch = None  # imported by main(): the script needs torch with CUDA


def _load_torch():
    global torch
    try:
        import torch as t
    except Exception as exc:
        sys.exit(_refuse(f"torch is not importable ({type(exc).__name__}: {exc})"))
    if not t.cuda.is_available():
        sys.exit(_refuse("torch.cuda.is_available() is False"))
    torch = t


def _refuse(why: str) -> int:
    print(f"h200_proof.py needs torch with CUDA (run it on the GPU machine): {why}", file=sys.stderr)
    return 2


class Model:
    """A chain of bf16 products: x (m x k) @ W (k x k), n times."""

    def __init__(self, m: int, k: int, n: int):
        self.x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        self.w = torch.randn(k, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        self.n = n

    def __call__(self):
        y = self.x
        for _ in range(self.n):
            y = y @ self.w
        return y


MODEL: Model | None = None


class TorchRunner(rn.GPUModelRunner):
    """GPUModelRunner of the stand-ins with a real forward and sampler."""

    copy_stream = None
    hidden = None

    def _model_forward(self, scheduler_output=None, **kw):
        with torch.profiler.record_function(f"mbench_fwd_{scheduler_output.standin_step}"):
            self.hidden = MODEL()
        return self.hidden

    def sample_tokens(self, grammar_output):
        if self.execute_model_state is None:
            return None
        scheduler_output, kv_out = self.execute_model_state
        self.execute_model_state = None
        tokens = self.hidden[:256, :64].argmax(dim=-1)  # one token per request (256 running)
        out = rn.ModelRunnerOutput(req_ids=list(scheduler_output.num_scheduled_tokens),
                                   kv_connector_output=kv_out)
        if not self.use_async_scheduling:
            out.tokens = tokens.tolist()  # the blocking copy
            return out
        return AsyncOutput(out, tokens, self)


class AsyncOutput:
    """AsyncGPUModelRunnerOutput: copy on a side stream, an event, a sync."""

    is_async = True

    def __init__(self, out, tokens, runner):
        if TorchRunner.copy_stream is None:
            TorchRunner.copy_stream = torch.cuda.Stream()
        self.out = out
        self.ev = torch.cuda.Event()
        s = TorchRunner.copy_stream
        default = torch.cuda.current_stream()
        with torch.cuda.stream(s):
            s.wait_stream(default)
            self.cpu = tokens.to("cpu", non_blocking=True)
            self.ev.record()
        self._tokens = tokens

    def get_output(self):
        self.ev.synchronize()
        self.out.tokens = self.cpu.tolist()
        return self.out


def load(name: str):
    if name == "gpu_bound":
        return Model(4096, 8192, 7), Timings(schedule=400 * US, execute=200 * US, update=400 * US)
    return Model(6144, 8192, 1), Timings(schedule=2500 * US, execute=500 * US, update=3000 * US)


def run(version: str, load_name: str, async_scheduling: bool, steps: int, out_dir: str) -> dict:
    global MODEL
    from mbench_vllm import plugin

    log = os.path.join(out_dir, f"steps_{version}_{load_name}_{'bq' if async_scheduling else 'step'}.jsonl")
    if os.path.exists(log):
        os.remove(log)
    os.environ["MBENCH_STEP_LOG"] = log
    plugin._reset_for_tests()
    MODEL, t = load(load_name)
    rn.RUNNER_BASE = TorchRunner
    ns = fake_vllm(VERSIONS[version], gpu="real")
    cfg = VllmConfig(timings=t, async_scheduling=async_scheduling, decode=256,
                     kv_transfer_config=None)
    eng = ns.EngineCore(cfg, ns.Executor, log_stats=False)
    for _ in range(10):  # warm-up: cuBLAS handles, the allocator, the events' pool
        eng.step_fn()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            eng.step_fn()
        torch.cuda.synchronize()
    eng.model_executor.shutdown()
    plugin._reset_for_tests()  # flushes the log
    fwd, mm_us = {}, 0.0
    for ev in prof.key_averages():
        dev = getattr(ev, "device_time_total", None)
        if dev is None:
            dev = getattr(ev, "cuda_time_total", 0)
        if ev.key.startswith("mbench_fwd_") and dev > 0:
            fwd[int(ev.key.rsplit("_", 1)[1])] = dev / ev.count  # µs
        elif ev.key == "aten::mm":  # every product of every forward
            mm_us = dev
    agg_fwd_us = mm_us / steps  # the second truth: all forwards' product kernels, per forward
    lines = [json.loads(x) for x in open(log) if x.strip()]
    status = [d for d in lines if d.get("status") == "engine"]
    stepl = [d for d in lines if "step_duration_us" in d]
    ratios, pairs = [], []
    first = min(fwd) if fwd else None
    for d in stepl:
        b = d.get("batch")
        if "gpu_us" not in d or b is None:
            continue
        if fwd:
            truth = fwd.get(b - 1)  # batch ids count schedule() calls from 1
        else:  # no per-range device time in this torch: the aggregate
            truth = agg_fwd_us if b > 10 else None
        if truth:
            ratios.append(d["gpu_us"] / truth)
            pairs.append((b, d["gpu_us"], truth))
    q = statistics.quantiles(ratios, n=10) if len(ratios) >= 10 else [float("nan")] * 9
    med = statistics.median(ratios) if ratios else float("nan")
    res = {
        "version": version, "load": load_name, "path": "batch_queue" if async_scheduling else "step",
        "steps": len(stepl), "joined": len(ratios), "status_gpu": status[-1].get("gpu_time") if status else None,
        "gpu_us_p50": statistics.median(p[1] for p in pairs) if pairs else None,
        "profiler_fwd_us_p50": statistics.median(p[2] for p in pairs) if pairs else None,
        "ratio_p10": q[0], "ratio_p50": med, "ratio_p90": q[-1],
        "truth": "per batch: device time under record_function" if fwd else "aggregate: aten::mm device time per forward",
        "aten_mm_us_per_forward": agg_fwd_us, "first_profiled_batch": first,
        "step_us_p50": statistics.median(d["step_duration_us"] for d in stepl[5:]),
        "wait_us_p50": statistics.median(d.get("wait_us", 0) for d in stepl[5:]) if async_scheduling else None,
        "log": os.path.basename(log),
    }
    res["within_5pct"] = sum(abs(x - 1) <= 0.05 for x in ratios) / len(ratios) if ratios else 0.0
    res["pass"] = bool(ratios) and len(ratios) >= 0.8 * steps and abs(med - 1) <= 0.05
    return res


def timer_cost(chunks: int = 20, per: int = 200) -> dict:
    """Engine-thread CPU of the GPU timer: paired chunks, timer on / off."""
    global MODEL
    from mbench_vllm import plugin
    from mbench_vllm.gpu import GPU

    os.environ["MBENCH_STEP_LOG"] = "/tmp/mbench_timer_cost.jsonl"
    plugin._reset_for_tests()
    MODEL = Model(256, 1024, 4)  # tiny: the CPU side dominates
    rn.RUNNER_BASE = TorchRunner
    ns = fake_vllm(VERSIONS["main"], gpu="real")
    eng = ns.EngineCore(VllmConfig(timings=Timings(), async_scheduling=True, decode=256), ns.Executor, False)
    for _ in range(50):
        eng.step_fn()
    on, off = [], []
    for _ in range(chunks):
        for flag, res in ((True, on), (False, off)):
            GPU.measured = flag
            t0 = time.thread_time_ns()
            for _ in range(per):
                eng.step_fn()
            res.append((time.thread_time_ns() - t0) / per / 1000)
    GPU.measured = True
    plugin._reset_for_tests()
    d = [a - b for a, b in zip(on, off)]
    return {"gpu_timer_engine_thread_us_per_step": statistics.median(d),
            "step_engine_thread_us_timer_off": statistics.median(off)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    _load_torch()
    os.makedirs(a.out, exist_ok=True)
    import tarfile
    import tempfile

    logs = tempfile.mkdtemp(prefix="mbench_steps_")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    results = []
    for version in ("0.18", "main"):
        for load_name in ("gpu_bound", "cpu_bound"):
            for bq in (True, False):
                r = run(version, load_name, bq, a.steps, logs)
                results.append(r)
                print(f"{'PASS' if r['pass'] else 'FAIL'} vLLM {version} {r['path']:<11} {load_name:<9} "
                      f"gpu_us p50 {r['gpu_us_p50']:.1f} vs profiler {r['profiler_fwd_us_p50']:.1f} us "
                      f"(ratio p10/p50/p90 {r['ratio_p10']:.4f}/{r['ratio_p50']:.4f}/{r['ratio_p90']:.4f}, "
                      f"{r['within_5pct']:.0%} of batches within 5%, {r['joined']}/{r['steps']} steps joined); step p50 {r['step_us_p50']:.0f} us, "
                      f"wait p50 {r['wait_us_p50']}", flush=True)
    cost = timer_cost()
    print(f"GPU timer on the engine thread: {cost['gpu_timer_engine_thread_us_per_step']:.2f} us/step "
          f"(step {cost['step_engine_thread_us_timer_off']:.1f} us without it)", flush=True)
    ok = all(r["pass"] for r in results)
    with tarfile.open(os.path.join(a.out, "steps.tar.gz"), "w:gz") as tar:  # one file for all step logs
        for name in sorted(os.listdir(logs)):
            tar.add(os.path.join(logs, name), arcname=name)
    with open(os.path.join(a.out, "proof.json"), "w") as f:
        json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "results": results,
                   "timer_cost": cost, "all_pass": ok}, f, indent=1)
    print("ALL PASS" if ok else "SOME FAILED", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
