#!/usr/bin/env python3
"""A reconstruction of the client of `vllm bench serve`, for `mbench bench-load --compare`.

It does what vLLM's benchmark client does on its default path (the openai
completions backend, Poisson arrivals, no concurrency cap), written anew here
after reading vllm-project/vllm:

- vllm/benchmarks/serve.py at b36adfa349cfab0e79f3d736d5e5413bd3ee19f5
  (main's last commit before the 0.18 cut, so in 0.18.1; get_request
  L243-L339, benchmark()'s session L641-L655, its tasks L846):
  get_request() draws every gap up front from a gamma law (shape
  burstiness = 1: exponential), rescales their sum to n/rate, and before each
  request sleeps (asyncio.sleep) until start + its offset on time.time();
  benchmark() makes one aiohttp.ClientSession over a TCPConnector(limit=0,
  limit_per_host=0, ttl_dns_cache=300, use_dns_cache=True,
  keepalive_timeout=60, enable_cleanup_closed=True, force_close=False),
  trust_env=True, a 6 h total timeout, and starts each request as its own
  asyncio task (create_task), gathering them at the end.
- vllm/benchmarks/lib/endpoint_request_func.py at
  b36adfa349cfab0e79f3d736d5e5413bd3ee19f5 (L152-L250):
  async_request_openai_completions() posts {"model", "prompt", "repetition_penalty": 1.0,
  "max_tokens", "logprobs": None, "stream": True, "stream_options":
  {"include_usage": True}} with the x-request-id header, takes
  st = time.perf_counter() just before session.post, reads
  response.content.iter_any(), splits the text on blank lines
  (StreamedResponseHandler), and stamps time.perf_counter() at each message
  whose "choices" is not empty: the first gives TTFT, the others the ITLs;
  a "usage" message gives completion_tokens.

What is mbench's and not vLLM's: the prompt is a list of token ids (as
mbench sends), the command line (bench-load's), pinning with --cpus, and the
output: mbench's requests.jsonl records (times in ns from the schedule's
start) and a .meta file with the start on the wall clock and the process's
CPU time. Needs aiohttp (no numpy: the gaps come from random.gammavariate,
the same law).
"""

import argparse
import asyncio
import json
import os
import random
import resource
import sys
import time

import aiohttp


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="base URL of the server")
    p.add_argument("--rate", type=float, required=True, help="Poisson rate, req/s")
    p.add_argument("--duration", type=float, required=True, help="measured seconds")
    p.add_argument("--warmup", type=int, default=0, help="requests before the measured ones, same schedule")
    p.add_argument("--input", type=int, default=256, help="prompt tokens")
    p.add_argument("--output", type=int, default=16, help="max_tokens")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--model", default="stub-model")
    p.add_argument("--out", required=True, help="requests.jsonl to write (and OUT.meta)")
    p.add_argument("--cpus", default="", help="pin to these CPUs, e.g. 0,1")
    return p.parse_args(argv)


def cpu_list(s):
    out = []
    for part in s.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def schedule(n, rate, rng, burstiness=1.0):
    """Offsets in seconds from the start, as serve.py's get_request draws them."""
    theta = 1.0 / (rate * burstiness)
    delays, t = [], 0.0
    for _ in range(n):
        t += rng.gammavariate(burstiness, theta)
        delays.append(t)
    if delays and delays[-1] != 0:
        scale = (n / rate) / delays[-1]
        delays = [d * scale for d in delays]
    return delays


def split_messages(buf):
    """Complete SSE messages of buf (split on blank lines) and the rest."""
    msgs = []
    while "\n\n" in buf:
        m, buf = buf.split("\n\n", 1)
        m = m.strip()
        if m:
            msgs.append(m)
    if buf.startswith("data: "):
        rest = buf[len("data: "):].strip()
        if rest == "[DONE]":
            msgs.append(buf.strip())
            buf = ""
        elif rest:
            try:
                json.loads(rest)
                msgs.append(buf.strip())
                buf = ""
            except json.JSONDecodeError:
                pass
    return msgs, buf


async def one_request(session, url, model, prompt, max_tokens, req_id):
    """One streamed completion; returns (st, first, stamps, tokens, error)."""
    payload = {"model": model, "prompt": prompt, "repetition_penalty": 1.0, "max_tokens": max_tokens,
               "logprobs": None, "stream": True, "stream_options": {"include_usage": True}}
    headers = {"x-request-id": req_id}
    stamps, tokens, err = [], 0, ""
    st = time.perf_counter()
    try:
        async with session.post(url=url, json=payload, headers=headers) as resp:
            if resp.status != 200:
                return st, stamps, tokens, f"HTTP {resp.status}: {resp.reason or ''}"
            buf = ""
            async for chunk in resp.content.iter_any():
                chunk = chunk.strip()
                if not chunk:
                    continue
                msgs, buf = split_messages(buf + chunk.decode("utf-8"))
                for m in msgs:
                    if m.startswith(":"):
                        continue
                    data = m.removeprefix("data: ")
                    if data == "[DONE]":
                        continue
                    d = json.loads(data)
                    if d.get("choices"):
                        stamps.append(time.perf_counter())
                    elif d.get("usage"):
                        tokens = d["usage"].get("completion_tokens") or 0
            if not stamps:
                err = "never received a valid chunk"
    except Exception as e:  # noqa: BLE001 - vLLM's client records every failure as the request's
        err = f"{type(e).__name__}: {e}"
    return st, stamps, tokens, err


async def run(a):
    rng = random.Random(a.seed)
    n = a.warmup + max(1, round(a.rate * a.duration))
    offsets = schedule(n, a.rate, rng)
    prompts = [[rng.randrange(1000, 31000) for _ in range(a.input)] for _ in range(n)]
    url = a.url.rstrip("/") + "/v1/completions"
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, use_dns_cache=True,
                                     keepalive_timeout=60, enable_cleanup_closed=True, force_close=False)
    async with aiohttp.ClientSession(connector=connector, trust_env=True,
                                     timeout=aiohttp.ClientTimeout(total=6 * 60 * 60)) as session:
        prefix = f"vllmclient-{os.getpid()}-{a.seed}-"
        tasks = []
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        start_wall, start = time.time(), time.perf_counter()
        for i, off in enumerate(offsets):
            delay = start_wall + off - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one_request(session, url, a.model, prompts[i], a.output, prefix + str(i))))
        results = await asyncio.gather(*tasks)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    ns = lambda t: max(0, int((t - start) * 1e9))  # noqa: E731
    with open(a.out, "w") as f:
        for i, (st, stamps, tokens, err) in enumerate(results):
            done = stamps[-1] if stamps else st
            rec = {"id": i, "cell": "", "block": 0, "phase": "warmup" if i < a.warmup else "measure",
                   "scheduled_ns": int(offsets[i] * 1e9), "sent_ns": ns(st),
                   "first_token_ns": ns(stamps[0]) if stamps else 0, "last_token_ns": ns(stamps[-1]) if stamps else 0,
                   "done_ns": ns(done), "input_tokens": a.input, "output_tokens": tokens or len(stamps),
                   "itl_ms": [(b - x) * 1e3 for x, b in zip(stamps, stamps[1:])],
                   "status": "error" if err else "ok", "request_id": prefix + str(i)}
            if err:
                rec["error"], rec["error_class"] = err[:200], "other"
            f.write(json.dumps(rec) + "\n")
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    with open(a.out + ".meta", "w") as f:
        json.dump({"start_unix_ns": int(start_wall * 1e9), "cpu_s": cpu}, f)


def main(argv):
    a = parse_args(argv)
    if a.cpus:
        os.sched_setaffinity(0, cpu_list(a.cpus))
    asyncio.run(run(a))


if __name__ == "__main__":
    main(sys.argv[1:])
