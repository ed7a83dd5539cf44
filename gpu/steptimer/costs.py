"""The GPU timer's engine-thread costs that need no engine (h200_proof.py
runs them): the wrappers around a trivial forward on an idle GPU and the
CUDA and Python calls a timer may make per forward (the proof quotes its
chunked costs with vllm/tests/orderstats.median_ci). torch is whichever torch the
proof loaded (a real one on the GPU machine, the fake one in
vllm/tests/test_h200_script.py).
"""

from __future__ import annotations

import os
import statistics
import time


def forward_costs(reps: int = 40, per: int = 1000) -> dict:
    """Engine-thread CPU per forward (ns, thread time) of the GPU timer's
    wrappers around a trivial _model_forward, on an idle GPU (no kernels, so
    no wait on the GPU blurs it): for each kind of events (the driver's,
    then torch's) the timed wrapper and the default gate (a random 1 in 16
    timed), each beside the bare call in a rotating order, the queue read
    between blocks (outside the timing); medians over blocks."""
    import torch

    from mbench_vllm import plugin
    from mbench_vllm.gpu import GPU

    tt = time.thread_time_ns
    out: dict = {}
    if hasattr(torch, "zeros"):
        torch.zeros(1, device="cuda")  # torch's CUDA context current here, as in an engine with its model loaded
    for events in ("", "torch"):
        plugin._reset_for_tests()
        os.environ.pop("MBENCH_GPU_TIME", None)
        os.environ.pop("MBENCH_GPU_EVENTS", None)
        if events:
            os.environ["MBENCH_GPU_EVENTS"] = events

        class Runner:
            def _model_forward(self, x):
                return x

        GPU.install_runner(Runner())
        if not GPU.measured:
            raise SystemExit(f"forward costs: GPU timer not installed ({GPU.reason})")
        name = "driver events" if GPU.events is not None else "torch events"
        if events == "" and GPU.events is None:
            out["driver events not used"] = GPU.api
            continue
        gate = Runner.__dict__["_model_forward"]
        bare = gate.__wrapped__
        arms = {"bare": bare, f"{name}, every forward": GPU.timed(bare),
                f"{name}, a random 1 in {GPU.every}": gate}
        got: dict = {k: [] for k in arms}
        r, order = Runner(), list(arms)
        for i in range(reps):
            for k in order[i % 3:] + order[:i % 3]:
                f = arms[k]
                t0 = tt()
                for _ in range(per):
                    f(r, 1)
                got[k].append((tt() - t0) / per)
                torch.cuda.synchronize()
                GPU._read()
                GPU.unclaimed.clear()
        base = statistics.median(got["bare"])
        out.setdefault("bare call", base)
        for k in order[1:]:
            out[k] = statistics.median(got[k]) - base
    plugin._reset_for_tests()
    os.environ.pop("MBENCH_GPU_EVENTS", None)
    return out


def call_costs(n: int = 20000) -> dict:
    """Engine-thread CPU per call (ns, thread time) of what a GPU timer can
    do per forward, on an idle GPU: which part of the timer's cost is what."""
    from collections import deque

    import torch

    out = {}
    tt = time.thread_time_ns

    def per(f, k=n):
        t0 = tt()
        for _ in range(k):
            f()
        return (tt() - t0) / k

    out["cuda_current_stream"] = per(torch.cuda.current_stream)
    ce = torch.cuda.Event(enable_timing=True)
    out["cuda_Event_record"] = per(ce.record)
    st = torch.cuda.current_stream()
    out["cuda_Event_record_stream"] = per(lambda: ce.record(st))
    out["cuda_Event_new"] = per(lambda: torch.cuda.Event(enable_timing=True), 2000)
    if hasattr(torch, "Event"):
        te = torch.Event(device="cuda", enable_timing=True)
        out["torch_Event_record"] = per(te.record)
        out["torch_Event_query"] = per(te.query)
        out["torch_Event_new"] = per(lambda: torch.Event(device="cuda", enable_timing=True), 2000)
    out["cuda_Event_query"] = per(ce.query)
    d = deque()
    out["deque_append_pop"] = per(lambda: (d.append(1), d.pop()))
    out["perf_counter_ns"] = per(time.perf_counter_ns)
    torch.cuda.synchronize()
    return out
