"""The H200 proof of gpu_us: the plugin's CUDA-event GPU time per batch
against the torch profiler's kernel time, on vLLM's step loop.

    PYTHONPATH=vllm:vllm/tests python3 gpu/steptimer/h200_proof.py --out DIR

The step loop is the transcription of vLLM's (vllm/tests/standins: v0.18.1
at a26e8dc7 and main at 6adad087, which cite the vLLM files: EngineCore's
step and step_with_batch_queue, UniProcExecutor — 0.18.1's one-thread
hand-off, main's inline AsyncOutputFuture —, the worker and
GPUModelRunner's execute_model / _model_forward / sample_tokens). Here its
GPUModelRunner runs a real model on the GPU: ``_model_forward`` is a chain
of bf16 matrix products (known kernels), called inside
``torch.profiler.record_function("mbench_fwd_<batch>")`` (the range
encloses the plugin's events, so its own host work is not in gpu_us);
sampling is an
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
chunks with the timer on and off, and where any excess of gpu_us over the
kernels lies: per forward from the profiler trace (host time from the
start-event record to the first launch; launch to kernel start), each case
again without the profiler, the bare product between two events on an idle
and a busy GPU, and the engine-thread ns of each CUDA-event call.
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
sys.path[:0] = [HERE, os.path.join(ROOT, "vllm"), os.path.join(ROOT, "vllm", "tests")]
# The engine thread's timers as a real engine gets them: the C ones where
# they build (mbench_vllm/native.py), said in the first line.
os.environ.setdefault("MBENCH_VLLM_NATIVE", "1")

from standins import VERSIONS, fake_vllm  # noqa: E402
from standins import runner as rn  # noqa: E402
from standins.common import KVTransferConfig, Timings, VllmConfig, spin  # noqa: E402
from mbench_vllm import steplog  # noqa: E402
from costs import call_costs, forward_costs  # noqa: E402
from orderstats import median_ci  # noqa: E402

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

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        """runner.GPUModelRunner.execute_model with the profiler's range
        around the (plugin-wrapped) _model_forward call: the annotation's
        own host work is outside the plugin's events, so the proof does not
        measure itself."""
        if self.execute_model_state is not None:
            raise RuntimeError("State error: sample_tokens() must be called after execute_model() returns None.")
        t = self.vllm_config.timings
        t0 = rn.perf()
        spin(t.execute)  # preparing the inputs on the CPU
        t.note("execute", rn.perf() - t0)
        with self.maybe_get_kv_connector_output(scheduler_output) as kv_connector_output:
            with torch.profiler.record_function(f"mbench_fwd_{scheduler_output.standin_step}"):
                self._model_forward(scheduler_output)
        self.execute_model_state = (scheduler_output, kv_connector_output)
        return None

    def _model_forward(self, scheduler_output=None, **kw):
        self.hidden = MODEL()  # the forward's first kernel is the product's
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


def run(version: str, load_name: str, async_scheduling: bool, steps: int, out_dir: str,
        profile: bool = True) -> dict:
    global MODEL
    from mbench_vllm import plugin

    log = os.path.join(out_dir, f"steps_{version}_{load_name}_{'bq' if async_scheduling else 'step'}"
                       f"{'' if profile else '_noprof'}.steplog")
    if os.path.exists(log):
        os.remove(log)
    os.environ["MBENCH_STEP_LOG"] = log
    os.environ["MBENCH_GPU_TIME"] = "all"  # every batch against the profiler (the default samples 1 in 16)
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
    if not profile:
        for _ in range(steps):
            eng.step_fn()
        torch.cuda.synchronize()
        eng.model_executor.shutdown()
        plugin._reset_for_tests()
        stepl = [d for d in steplog.read(log) if "step_duration_us" in d][5:]
        g = [d["gpu_us"] for d in stepl if "gpu_us" in d]
        return {"gpu_us_p50_noprof": statistics.median(g) if g else None, "joined_noprof": len(g)}
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
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
    lines = steplog.read(log)
    status = [d for d in lines if d.get("status") == "engine"]
    stepl = [d for d in lines if "step_duration_us" in d]
    # ratios, pairs: the batches whose gpu_us the plugin gives as GPU time;
    # host: the spans it marked host-bound (an upper bound, left out).
    ratios, pairs, host, spans = [], [], [], []
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
            spans.append(d["gpu_us"] / truth)
            if d.get("gpu_host_bound"):
                host.append(d["gpu_us"] / truth)
                continue
            ratios.append(d["gpu_us"] / truth)
            pairs.append((b, d["gpu_us"], truth))
    q = statistics.quantiles(ratios, n=10) if len(ratios) >= 10 else [float("nan")] * 9
    med = statistics.median(ratios) if ratios else float("nan")
    res = {
        "version": version, "load": load_name, "path": "batch_queue" if async_scheduling else "step",
        "steps": len(stepl), "joined": len(ratios), "status_gpu": status[-1].get("gpu_time") if status else None,
        "gpu_hook": status[-1].get("gpu_hook") if status else None,
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
    res["excess_us_p50"] = statistics.median(p[1] - p[2] for p in pairs) if pairs else None
    res["host_bound"] = len(host)
    res["host_span_ratio_p50"] = statistics.median(host) if host else None
    res["span_ratio_p50"] = statistics.median(spans) if spans else None
    res.update(trace_gaps(prof, {p[0] - 1: p[1] for p in pairs}))
    # What the plugin gives as GPU time must be the kernels' (within 5%);
    # what it marks host-bound it does not give as GPU time. A case passes
    # when what it gives is right and nearly every batch was seen; the
    # verdict says how much it gave: "measured" (most batches), "not
    # measured (host-bound)" (most marked), or "partly measured".
    right = len(ratios) < 5 or abs(med - 1) <= 0.05
    if not right or len(spans) < 0.8 * steps:
        res["verdict"] = "wrong" if not right else "too few batches joined"
    elif len(ratios) >= 0.8 * steps:
        res["verdict"] = "measured"
    elif len(host) >= 0.8 * steps:
        res["verdict"] = "not measured (host-bound)"
    else:
        res["verdict"] = f"partly measured ({len(ratios)} of {len(spans)} batches)"
    res["pass"] = right and len(spans) >= 0.8 * steps
    return res


def trace_gaps(prof, gpu_by_step: dict) -> dict:
    """Where gpu_us exceeds the kernel time, from the profiler's trace: per
    forward (its mbench_fwd_<n> range), the host time from the plugin's
    start-event record (the range's first cudaEventRecord) to the first
    kernel launch, and from that launch to the kernel's start on the GPU.
    p50s in µs; "trace_note" says what was missing."""
    import tempfile

    try:
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        prof.export_chrome_trace(path)
        with open(path) as f:
            ev = json.load(f)
        os.remove(path)
        ev = ev.get("traceEvents", ev) if isinstance(ev, dict) else ev
    except Exception as exc:
        return {"trace_note": f"no trace: {exc!r}"}
    ranges, rt, kern = [], [], {}
    for e in ev:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat, name = e.get("cat", ""), e.get("name", "")
        if cat == "user_annotation" and name.startswith("mbench_fwd_"):
            ranges.append(e)
        elif cat == "cuda_runtime" or cat == "cuda_driver":
            rt.append(e)
        elif cat == "kernel":
            kern[(e.get("args") or {}).get("correlation")] = e
    rt.sort(key=lambda e: e["ts"])
    host, lat, kdur, spans = [], [], [], []
    import bisect

    starts = [e["ts"] for e in rt]
    for r in ranges:
        lo, hi = r["ts"], r["ts"] + r.get("dur", 0)
        i = bisect.bisect_left(starts, lo)
        rec = launch = None
        while i < len(rt) and rt[i]["ts"] <= hi:
            e = rt[i]
            if e.get("tid") == r.get("tid"):
                if rec is None and "EventRecord" in e["name"]:
                    rec = e
                elif rec is not None and launch is None and "Launch" in e["name"]:
                    launch = e
            i += 1
        if rec is None or launch is None:
            continue
        k = kern.get((launch.get("args") or {}).get("correlation"))
        host.append(launch["ts"] - (rec["ts"] + rec.get("dur", 0)))
        if k is not None:
            lat.append(k["ts"] - launch["ts"])
            kdur.append(k.get("dur", 0))
        n = int(r["name"].rsplit("_", 1)[1])
        if n in gpu_by_step:
            spans.append(gpu_by_step[n])
    out = {"trace_forwards": len(ranges), "trace_matched": len(host)}
    if not host:
        out["trace_note"] = (f"no cudaEventRecord / kernel launch inside the forward ranges "
                             f"({len(ranges)} ranges, {len(rt)} runtime calls, {len(kern)} kernels in the trace)")
        return out
    out["host_record_to_launch_us_p50"] = statistics.median(host)
    if lat:
        out["launch_to_kernel_start_us_p50"] = statistics.median(lat)
        out["kernel_us_p50"] = statistics.median(kdur)
    return out


def gap_probe(make, n: int = 100) -> dict:
    """The start gap on an idle GPU with nothing of the plugin's around it:
    the 1 ms product alone, between two events, after the GPU sat idle
    (host sleeps 5 ms) and after a long product keeps it busy. idle - busy
    is what recording the start event before the launch costs on an idle
    GPU; host_us is the host's time from the start record's return to the
    product's return (its dispatch and launch)."""
    m = Model(6144, 8192, 1)
    filler = Model(8192, 8192, 4)
    idle, busy, host = [], [], []
    for i in range(2 * n):
        torch.cuda.synchronize()
        is_idle = i % 2 == 0
        if is_idle:
            time.sleep(0.005)
        else:
            filler()
        e0, e1 = make(), make()
        e0.record()
        t0 = time.perf_counter_ns()
        m()
        t1 = time.perf_counter_ns()
        e1.record()
        e1.synchronize()
        if i >= 4:
            (idle if is_idle else busy).append(e0.elapsed_time(e1) * 1000)
            if is_idle:
                host.append((t1 - t0) / 1000)
    return {"idle_us_p50": statistics.median(idle), "busy_us_p50": statistics.median(busy),
            "idle_start_cost_us": statistics.median(idle) - statistics.median(busy),
            "host_dispatch_us_p50": statistics.median(host)}


def timer_cost(chunks: int = 60, per: int = 300, events: str = "") -> list:
    """Engine-thread CPU of the GPU timer, in one engine: the runner's
    _model_forward as the bare method, as the timed wrapper (every forward,
    MBENCH_GPU_TIME=all) and behind the default gate (a random 1 in 16),
    swapped in chunk by chunk in a rotating order; each arm's cost is the
    median over chunks of its difference to the bare chunk beside it."""
    global MODEL
    from mbench_vllm import plugin
    from mbench_vllm.gpu import GPU, find_runner

    os.environ["MBENCH_STEP_LOG"] = "/tmp/mbench_timer_cost.jsonl"
    os.environ.pop("MBENCH_GPU_TIME", None)  # the default: the gate
    if events:
        os.environ["MBENCH_GPU_EVENTS"] = events
    else:
        os.environ.pop("MBENCH_GPU_EVENTS", None)
    plugin._reset_for_tests()
    MODEL = Model(256, 1024, 4)  # tiny: the CPU side dominates
    rn.RUNNER_BASE = TorchRunner
    ns = fake_vllm(VERSIONS["main"], gpu="real")
    eng = ns.EngineCore(VllmConfig(timings=Timings(), async_scheduling=True, decode=256), ns.Executor, False)
    runner, why = find_runner(eng)
    if runner is None or not GPU.measured:
        raise SystemExit(f"timer cost: GPU timer not installed ({why or GPU.reason})")
    cls = type(runner)
    gate = cls.__dict__["_model_forward"]
    bare = gate.__wrapped__
    every, gate_kind, api = GPU.every, GPU.gate, GPU.api
    arms = {"bare": bare, "all": GPU.timed(bare), "default": gate}
    for f in arms.values():
        setattr(cls, "_model_forward", f)
        for _ in range(30):
            eng.step_fn()
    GPU_API[0] = GPU.api
    got: dict = {k: [] for k in arms}
    orders = (("bare", "all", "default"), ("all", "default", "bare"), ("default", "bare", "all"))
    for c in range(chunks):
        for k in orders[c % 3]:
            setattr(cls, "_model_forward", arms[k])
            t0 = time.thread_time_ns()
            for _ in range(per):
                eng.step_fn()
            got[k].append((time.thread_time_ns() - t0) / per / 1000)
    setattr(cls, "_model_forward", gate)
    plugin._reset_for_tests()
    os.environ.pop("MBENCH_GPU_EVENTS", None)
    out = []
    for k, setting, ev, g in (("all", "all", 1, ""), ("default", "", every, gate_kind)):
        m, lo, hi = median_ci([a - b for a, b in zip(got[k], got["bare"])])
        out.append({"setting": setting, "every": ev, "gate": g, "events": api, "gpu_timer_engine_thread_us_per_step": m,
                    "ci95": [lo, hi], "chunks": chunks, "steps_per_chunk": per,
                    "step_engine_thread_us_timer_off": statistics.median(got["bare"])})
    return out


GPU_API = [""]


def _f(x, fmt: str = ".1f") -> str:
    return "n/a" if x is None else format(x, fmt)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--cost-chunks", type=int, default=60, help="chunks per arm of the GPU timer's cost")
    ap.add_argument("--cases", default="",
                    help="only these cases, e.g. main:batch_queue:gpu_bound,main:batch_queue:cpu_bound "
                         "(version:path:load; default all 8; none: only the GPU timer's cost)")
    ap.add_argument("--quick", action="store_true",
                    help="skip the idle-gap probe and the per-call costs (the timer cost still runs)")
    a = ap.parse_args()
    only_cost = a.cases == "none"  # the GPU timer's cost alone
    want = set() if only_cost else {tuple(c.split(":")) for c in a.cases.split(",") if c}
    bad = [c for c in want if len(c) != 3 or c[0] not in ("0.18", "main") or c[1] not in ("batch_queue", "step")
           or c[2] not in ("gpu_bound", "cpu_bound")]
    if bad:
        sys.exit(f"--cases: {':'.join(bad[0])} is not version:path:load (0.18|main, batch_queue|step, "
                 "gpu_bound|cpu_bound)")
    _load_torch()
    os.makedirs(a.out, exist_ok=True)
    import tarfile
    import tempfile

    logs = tempfile.mkdtemp(prefix="mbench_steps_")
    from mbench_vllm._recorder import timers_status

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; timers: "
          f"{timers_status()['timers_detail']}", flush=True)
    results = []
    for version in ("0.18", "main"):
        for load_name in ("gpu_bound", "cpu_bound"):
            for bq in (True, False):
                if only_cost or want and (version, "batch_queue" if bq else "step", load_name) not in want:
                    continue
                r = run(version, load_name, bq, a.steps, logs)
                r.update(run(version, load_name, bq, a.steps, logs, profile=False))
                results.append(r)
                print(f"{'PASS' if r['pass'] else 'FAIL'} vLLM {version} {r['path']:<11} {load_name:<9} "
                      f"{r['verdict']}: gpu_us p50 {_f(r['gpu_us_p50'])} vs profiler {_f(r['profiler_fwd_us_p50'])} us "
                      f"(ratio p10/p50/p90 {r['ratio_p10']:.4f}/{r['ratio_p50']:.4f}/{r['ratio_p90']:.4f}, "
                      f"{r['within_5pct']:.0%} of batches within 5%, {r['joined']}/{r['steps']} steps joined); "
                      f"{r['host_bound']} host-bound (span/profiler p50 {_f(r['host_span_ratio_p50'], '.4f')}; "
                      f"all spans {_f(r['span_ratio_p50'], '.4f')}); step p50 {r['step_us_p50']:.0f} us, "
                      f"wait p50 {r['wait_us_p50']}", flush=True)
                print(f"     excess gpu_us - profiler p50 {_f(r.get('excess_us_p50'))} us; trace: host from start-event "
                      f"record to first launch p50 {_f(r.get('host_record_to_launch_us_p50'))} us, launch to kernel "
                      f"start {_f(r.get('launch_to_kernel_start_us_p50'))} us ({r.get('trace_matched', 0)}/"
                      f"{r.get('trace_forwards', 0)} forwards{'; ' + r['trace_note'] if r.get('trace_note') else ''}); "
                      f"gpu_us p50 without the profiler {_f(r.get('gpu_us_p50_noprof'))} us; events: "
                      f"{r.get('gpu_hook')}", flush=True)
    fc = forward_costs()
    print(f"GPU timer per forward, engine-thread ns beyond a bare call ({fc['bare call']:.0f} ns; idle GPU, "
          "a trivial forward): " + ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k}: {v}"
                                             for k, v in fc.items() if k != "bare call"), flush=True)
    cost = timer_cost(chunks=a.cost_chunks) + timer_cost(chunks=a.cost_chunks, events="torch")
    for c in cost:
        what = ("every forward timed (MBENCH_GPU_TIME=all)" if c["every"] == 1 else
                f"the default, a random 1 in {c['every']} forwards timed ({c['gate']} gate)")
        print(f"GPU timer on the engine thread, {what}: {c['gpu_timer_engine_thread_us_per_step']:.2f} us/step "
              f"(95% CI {c['ci95'][0]:.2f} to {c['ci95'][1]:.2f}; {c['chunks']} chunks of {c['steps_per_chunk']} steps; "
              f"step {c['step_engine_thread_us_timer_off']:.1f} us without it; events: {c['events']})", flush=True)
    from mbench_vllm.gpu import choose_events

    make, api = choose_events(torch)
    gap = gap_probe(make) if make is not None and not a.quick else {}
    if gap:
        print(f"Idle-GPU start gap ({api}, the 1 ms product alone between two events): idle "
              f"{gap['idle_us_p50']:.1f} us vs busy {gap['busy_us_p50']:.1f} us: the start event on an idle GPU "
              f"adds {gap['idle_start_cost_us']:.1f} us; host dispatch of the product {gap['host_dispatch_us_p50']:.1f} us",
              flush=True)
    costs = {} if a.quick else call_costs()
    if costs:
        print("Engine-thread CPU per call (ns): " + ", ".join(f"{k} {v:.0f}" for k, v in costs.items()), flush=True)
    ok = all(r["pass"] for r in results)
    with tarfile.open(os.path.join(a.out, "steps.tar.gz"), "w:gz") as tar:  # one file for all step logs
        for name in sorted(os.listdir(logs)):
            tar.add(os.path.join(logs, name), arcname=name)
    with open(os.path.join(a.out, "proof.json"), "w") as f:
        json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "results": results,
                   "timer_cost": cost, "forward_costs_ns": fc, "idle_gap": gap, "call_costs_ns": costs, "all_pass": ok}, f, indent=1)
    print("ALL PASS" if ok else "SOME FAILED", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
