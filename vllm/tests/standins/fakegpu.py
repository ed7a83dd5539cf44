"""A fake GPU and the sliver of ``torch`` the plugin and the stand-ins use.

A model of one CUDA device with one stream: work is queued, not run; a
kernel starts when the stream is free and the host has launched it, and
takes the time it was given. ``torch.cuda.Event`` follows CUDA's semantics:
``record()`` marks the point in the stream's queue (the event completes
when all work queued before it has), ``query()`` says whether it has,
without waiting, ``synchronize()`` waits, and ``elapsed_time(end)`` is the
time between two completed events in ms and raises (as CUDA's
cudaErrorNotReady does) when either is not complete. Every kernel is logged
with its batch: the profiler's ground truth of GPU time.

``install()`` puts the fake ``torch`` into ``sys.modules``; without it the
stand-ins run no GPU model and the plugin finds no torch — the
"not measured" case.

``attach_driver(lib)`` joins the fake CUDA driver (tests/fakecuda,
loaded with ctypes) to the device: every launch moves its stream's end
(``fakecu_free_at``), and the fake torch gains what the plugin's driver
events read from a real one: ``torch._C._cuda_getCurrentRawStream``
(torch's C binding, used by torch's own inductor; the legacy default
stream is 0) and ``torch.cuda.current_device``.
"""

from __future__ import annotations

import sys
import time
import types

from .common import perf


class Device:
    """One GPU with one stream; times are perf_counter_ns."""

    def __init__(self) -> None:
        self.free_at = 0
        self.kernels: list[tuple[object, int, int]] = []  # (tag, start, ns)

    def launch(self, ns: int, tag=None) -> None:
        start = max(perf(), self.free_at)
        self.free_at = start + ns
        self.kernels.append((tag, start, ns))
        if _DRIVER_END is not None:
            _DRIVER_END.value = self.free_at

    def kernel_ns(self, tag) -> int:
        """The profiler's view: total kernel time of one tag (a batch)."""
        return sum(ns for t, _, ns in self.kernels if t == tag)


DEVICE = Device()


class Event:
    def __init__(self, enable_timing: bool = False, **_):
        self.enable_timing = enable_timing
        self.t: int | None = None

    def record(self, stream=None) -> None:
        self.t = max(perf(), DEVICE.free_at)

    def query(self) -> bool:
        return self.t is not None and perf() >= self.t

    def synchronize(self) -> None:
        # Blocks without the GIL, as cudaEventSynchronize does.
        while not self.query():
            time.sleep(max(0, self.t - perf()) / 1e9 if self.t is not None else 0)

    def elapsed_time(self, end: "Event") -> float:
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if not (self.query() and end.query()):
            raise RuntimeError("CUDA error: device not ready")
        return (end.t - self.t) / 1e6


class Stream:
    def wait_stream(self, other) -> None:
        pass


_DRIVER = None  # the fake CUDA driver (ctypes CDLL), when attached
_DRIVER_END = None  # its fakecu_free_at


def attach_driver(lib) -> None:
    """Join the fake CUDA driver ``lib`` (a ctypes CDLL; None detaches)."""
    global _DRIVER, _DRIVER_END
    import ctypes

    _DRIVER = lib
    _DRIVER_END = None if lib is None else ctypes.c_longlong.in_dll(lib, "fakecu_free_at")
    if lib is not None:
        lib.fakecu_init()
        _DRIVER_END.value = DEVICE.free_at


def make_torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.__path__ = []
    if _DRIVER is not None:
        torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: 0)
    cuda = types.ModuleType("torch.cuda")
    cuda.current_device = lambda: 0
    cuda.is_available = lambda: True
    cuda.Event = Event
    cuda.Stream = Stream
    cuda.current_stream = lambda device=None: _STREAM
    torch.cuda = cuda
    torch.Event = Event
    torch.__mbench_fake__ = True
    return torch


_STREAM = Stream()


def install() -> types.ModuleType:
    """A fresh fake device, and the fake torch in sys.modules."""
    global DEVICE
    _set_aside()
    DEVICE = Device()
    if _DRIVER_END is not None:
        _DRIVER_END.value = 0
    torch = make_torch()
    sys.modules["torch"] = torch
    sys.modules["torch.cuda"] = torch.cuda
    return torch


_REAL: dict = {}  # a real torch's modules, set aside while blocked or faked


def _set_aside() -> None:
    for name in ("torch", "torch.cuda"):
        m = sys.modules.get(name)
        if m is not None and not getattr(sys.modules.get("torch"), "__mbench_fake__", False):
            _REAL.setdefault(name, m)


def block_torch() -> None:
    """Make ``import torch`` fail (as on a host without it), even where a
    real torch is installed (the GPU machine)."""
    _set_aside()
    sys.modules["torch"] = None  # type: ignore[assignment]
    sys.modules.pop("torch.cuda", None)


def uninstall() -> None:
    """Undo install() and block_torch(): back to whatever torch was there."""
    t = sys.modules.get("torch", False)
    if t is None or getattr(t, "__mbench_fake__", False):
        for name in ("torch", "torch.cuda"):
            sys.modules.pop(name, None)
    sys.modules.update(_REAL)
    _REAL.clear()


def device() -> Device:
    return DEVICE
