"""Scenarios run in a fresh interpreter (exit paths, forked/spawned workers).

    python scenario.py steps N [sysexit]   engine core: N steps, then exit
    python scenario.py fork N              core steps + a forked worker process
    python scenario.py spawn N             a spawned worker process only

MBENCH_STEP_LOG comes from the environment. Prints "pid=<worker pid>" for
the worker scenarios. Uses the 0.10 stand-ins (tests/standins/v0_10.py).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

from helpers import US, Timings, config, engine, run_steps  # noqa: E402
from standins import VERSIONS, fake_vllm  # noqa: E402


def worker_loop(n: int, gf_ns: int, fresh: bool) -> None:
    """A vLLM worker process: its own connector (role WORKER) and forwards."""
    if fresh:  # spawned: a new interpreter, vLLM modules and plugins load here
        ns = fake_vllm(VERSIONS["0.10"])
        ns.plugins.load_general_plugins()  # WorkerWrapperBase.init_worker does this
        cfg = config(Timings(execute=200 * US, get_finished=gf_ns))
    else:  # forked from the engine core process
        ns, cfg = _FORK_CTX
        ns.state.agent = None
        cfg.timings.get_finished = gf_ns
    ns.ensure_kv_transfer_initialized(cfg)
    runner = ns.ModelRunner(cfg)
    from standins.common import make_scheduler_output

    for i in range(n):
        so = make_scheduler_output(cfg, i)
        so.kv_connector_metadata = object()
        runner.execute_model(so)


_FORK_CTX = None


def main() -> None:
    global _FORK_CTX
    mode, n = sys.argv[1], int(sys.argv[2])
    if mode == "steps":
        ns = fake_vllm(VERSIONS["0.10"])
        eng = engine(ns, config(Timings(schedule=50 * US, execute=100 * US), connector=None))
        run_steps(eng, n)
        if sys.argv[3:] == ["sysexit"]:
            raise SystemExit(0)
        return
    if mode == "fork":
        ns = fake_vllm(VERSIONS["0.10"])
        cfg = config(Timings(execute=200 * US, get_finished=100 * US))
        eng = engine(ns, cfg)
        run_steps(eng, 2)
        _FORK_CTX = (ns, cfg)
        # The worker's connector takes 50 ms, the core's 100 µs: far apart
        # enough that a loaded machine's delays cannot blur which is which.
        p = mp.get_context("fork").Process(target=worker_loop, args=(n, 50000 * US, False))
        p.start()
        p.join()
        assert p.exitcode == 0, p.exitcode
        run_steps(eng, 2)
        print(f"pid={p.pid}")
        return
    if mode == "spawn":
        p = mp.get_context("spawn").Process(target=worker_loop, args=(n, 5000 * US, True))
        p.start()
        p.join()
        assert p.exitcode == 0, p.exitcode
        print(f"pid={p.pid}")
        return
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
