"""gpu/steptimer/h200_proof.py, run here end to end on a fake torch (the
fake GPU of standins/fakegpu.py with products timed by their FLOPs, and a
profiler that reads the fake device's kernel log), so the script the lead
runs on the H200 has been through every line of its flow; and it refuses
to run (exit 2, a clear message) where there is no CUDA.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import types

import pytest

from standins import fakegpu

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "gpu", "steptimer", "h200_proof.py")
FLOPS = 800e12  # a fake H200's bf16 rate


class Tensor:
    def __init__(self, shape, tag=None):
        self.shape = tuple(shape)

    def __truediv__(self, x):
        return Tensor(self.shape)

    def __matmul__(self, other):
        m, k = self.shape
        n = other.shape[1]
        fakegpu.device().launch(int(2 * m * k * n / FLOPS * 1e9), _RANGE[-1] if _RANGE else None)
        return Tensor((m, n))

    def __getitem__(self, idx):
        return Tensor((self.shape[0], 64))

    def argmax(self, dim=-1):
        fakegpu.device().launch(5_000, None)
        return Tensor((self.shape[0],))

    def to(self, device, non_blocking=False):
        return Tensor(self.shape)

    def tolist(self):
        _synchronize()
        return [0] * self.shape[0]


_RANGE: list = []


def _synchronize():
    e = fakegpu.Event()
    e.record()
    e.synchronize()


class _Profile:
    def __init__(self, activities=None):
        self.n0 = 0

    def __enter__(self):
        self.n0 = len(fakegpu.device().kernels)
        _PROF.append(self)
        self.counts = {}
        return self

    def __exit__(self, *exc):
        _PROF.remove(self)
        self.kernels = fakegpu.device().kernels[self.n0:]

    def export_chrome_trace(self, path):
        with open(path, "w") as f:  # no runtime events: the script says the trace lacks them
            json.dump({"traceEvents": []}, f)

    def key_averages(self):
        tot: dict = {}
        for tag, _, ns in self.kernels:
            if tag:
                tot[tag] = tot.get(tag, 0) + ns
        return [types.SimpleNamespace(key=k, count=self.counts.get(k, 1), device_time_total=v / 1000)
                for k, v in tot.items()]


_PROF: list = []


@contextlib.contextmanager
def record_function(name):
    for p in _PROF:
        p.counts[name] = p.counts.get(name, 0) + 1
    _RANGE.append(name)
    try:
        yield
    finally:
        _RANGE.pop()


def fake_torch() -> types.ModuleType:
    torch = fakegpu.make_torch()
    torch.__version__ = "0.0-fake"
    torch.__mbench_fake__ = False  # plays the installed torch: fake_vllm(gpu="real") keeps it
    torch.bfloat16 = "bf16"
    torch.randn = lambda *shape, device=None, dtype=None: Tensor(shape)
    torch.cuda.synchronize = _synchronize
    torch.cuda.get_device_name = lambda: "fake H200"
    torch.cuda.stream = lambda s: contextlib.nullcontext()
    prof = types.ModuleType("torch.profiler")
    prof.profile = _Profile
    prof.record_function = record_function
    prof.ProfilerActivity = types.SimpleNamespace(CPU="cpu", CUDA="cuda")
    torch.profiler = prof
    return torch


def _run_proof(tmp_path, monkeypatch, *args: str):
    """h200_proof.py's main() on the fake torch: (exit code, proof.json)."""
    torch = fake_torch()
    fakegpu.install()
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.cuda", torch.cuda)
    monkeypatch.setitem(sys.modules, "torch.profiler", torch.profiler)
    spec = importlib.util.spec_from_file_location("h200_proof", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(sys, "argv", ["h200_proof.py", "--out", str(tmp_path), "--steps", "40", *args])
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    try:
        with pytest.raises(SystemExit) as e:
            mod.main()
    finally:
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[k]
        sys.modules.update(saved)
        from mbench_vllm import plugin

        plugin._reset_for_tests()
        os.environ.pop("MBENCH_STEP_LOG", None)
        mod.rn.RUNNER_BASE = None
    return e.value.code, json.loads((tmp_path / "proof.json").read_text())


def _check_verdicts(code, results):
    """What the proof decides, from its own figures, on any machine.

    gpu_us spans a batch's kernels, so it is never below their time. Where
    the start event is recorded behind queued work (GPU-bound, batch queue)
    it is their time: measured, a pass. Elsewhere the fake GPU, like a real
    one, is idle at the start event, and the host's launch, which a loaded
    test machine stretches, is inside the span; the plugin marks a span
    host-bound when that launch is over 5% of it, so what it still gives as
    GPU time is within 5% — whatever the load, every case passes, as
    measured or as not measured, and the exit status follows.
    """
    for r in results:
        assert r["status_gpu"] == "measured" and r["joined"] + r["host_bound"] >= 30, r
        assert "no cudaEventRecord" in r["trace_note"], r
        if r["joined"]:
            assert r["ratio_p10"] >= 0.99, r
        assert r["pass"] and (r["verdict"] in ("measured", "not measured (host-bound)")
                              or r["verdict"].startswith("partly measured")), r
        if r["path"] == "batch_queue" and r["load"] == "gpu_bound":
            assert r["verdict"] == "measured", r
    assert code == 0


def test_h200_script_end_to_end_on_a_fake_gpu(tmp_path, monkeypatch):
    code, proof = _run_proof(tmp_path, monkeypatch, "--cost-chunks", "6")
    assert len(proof["results"]) == 8
    _check_verdicts(code, proof["results"])
    cpu = [r for r in proof["results"] if r["load"] == "cpu_bound" and r["path"] == "batch_queue"]
    assert all(r["gpu_us_p50"] is None or r["step_us_p50"] > 4 * r["gpu_us_p50"] for r in cpu)  # GPU mostly idle
    assert proof["idle_gap"]["busy_us_p50"] > 0 and "torch_Event_record" in proof["call_costs_ns"]
    assert sorted(os.listdir(tmp_path)) == ["proof.json", "steps.tar.gz"]
    import tarfile

    with tarfile.open(tmp_path / "steps.tar.gz") as tar:
        assert len(tar.getnames()) == 16  # 8 profiled runs and the same 8 without the profiler


def test_h200_script_timers_mode_cases(tmp_path, monkeypatch):
    """run.sh timers: the two main batch-queue cases, the timer cost, no
    idle-gap probe or per-call costs."""
    code, proof = _run_proof(tmp_path, monkeypatch, "--cases", "main:batch_queue:gpu_bound,main:batch_queue:cpu_bound",
                             "--quick", "--cost-chunks", "6")
    _check_verdicts(code, proof["results"])
    assert [(r["version"], r["path"], r["load"]) for r in proof["results"]] == [
        ("main", "batch_queue", "gpu_bound"), ("main", "batch_queue", "cpu_bound")]
    assert proof["idle_gap"] == {} and proof["call_costs_ns"] == {}
    # The GPU timer's cost timing every forward, then at the default sampling.
    # The GPU timer's cost timing every forward, then at the default
    # sampling: on this install's events, then on torch's.
    assert [(c["setting"], c["every"]) for c in proof["timer_cost"]] == [("all", 1), ("", 16)] * 2, proof["timer_cost"]
    assert proof["timer_cost"][1]["gate"] in ("c", "python")
    assert "torch" in proof["timer_cost"][3]["events"], proof["timer_cost"]
    for c in proof["timer_cost"]:
        lo, hi = c["ci95"]
        assert lo <= c["gpu_timer_engine_thread_us_per_step"] <= hi and c["chunks"] == 6, c
    import tarfile

    with tarfile.open(tmp_path / "steps.tar.gz") as tar:
        assert len(tar.getnames()) == 4


def test_h200_script_cost_only(tmp_path, monkeypatch):
    """--cases none: no case runs, only the GPU timer's cost; the proof
    passes (nothing failed)."""
    code, proof = _run_proof(tmp_path, monkeypatch, "--cases", "none", "--quick", "--cost-chunks", "3")
    assert code == 0 and proof["results"] == [] and len(proof["timer_cost"]) == 4, proof
    fc = proof["forward_costs_ns"]
    assert fc["bare call"] > 0 and any(k.endswith("every forward") for k in fc), fc


def test_h200_script_rejects_unknown_cases(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["h200_proof.py", "--out", str(tmp_path), "--cases", "main:bq:gpu_bound"])
    spec = importlib.util.spec_from_file_location("h200_proof", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit) as e:
        mod.main()
    assert "main:bq:gpu_bound is not version:path:load" in str(e.value.code)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                    reason="a torch is installed (the GPU machine runs the script itself)")
def test_h200_script_refuses_without_cuda(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "vllm"), HERE]))
    r = subprocess.run([sys.executable, SCRIPT, "--out", str(tmp_path)], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "needs torch with CUDA" in r.stderr
