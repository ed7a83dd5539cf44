#!/usr/bin/env python3
"""Holds mbench to real vLLM's own account (gpu/vllm/run.sh runs it there).

    check.py load DIR    DIR holds metrics-before.txt / metrics-after.txt (vLLM's
                         /metrics around one `mbench load` run sent with no
                         warm-up), out/requests.jsonl (mbench's records) and
                         engine_step.jsonl (the plugin's step log)
    check.py sweep DIR   an mbench sweep directory: each run's step log

Load: for TTFT, TPOT and E2EL, vLLM's histogram (the delta over the run)
against mbench's per-request values: the count, and at every bucket bound
the share of requests at or below it (histogram vs mbench; the two can only
differ by requests whose two timings straddle the bound), and the bucket
that holds each of p50/p90/p99 in both. Steps: the decomposition's identity
(the timed parts plus unaccounted equal the step), the unaccounted share,
GPU time measured, and the number of steps that scheduled tokens against
vLLM's own count of them (vllm:iteration_tokens_total). Queue time and the
prefix cache from vLLM's counters beside mbench's cached_tokens.
"""

import json
import math
import os
import re
import statistics
import sys

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')


def parse(path):
    """name -> list of (labels dict, value)."""
    out = {}
    for line in open(path):
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


def hist(before, after, name):
    """The run's histogram: [(le, cumulative count)], count, sum; None if absent."""
    def buckets(d):
        b = {}
        for labels, v in d.get(name + "_bucket", []):
            le = labels.get("le")
            b[le] = b.get(le, 0) + v
        return b
    a, b = buckets(after), buckets(before)
    if not a:
        return None
    bs = sorted(((float("inf") if le == "+Inf" else float(le)), a[le] - b.get(le, 0)) for le in a)
    cnt = sum(v for _, v in after.get(name + "_count", [])) - sum(v for _, v in before.get(name + "_count", []))
    tot = sum(v for _, v in after.get(name + "_sum", [])) - sum(v for _, v in before.get(name + "_sum", []))
    return bs, cnt, tot


def counter(before, after, *names):
    for n in names:
        if n in after:
            return sum(v for _, v in after[n]) - sum(v for _, v in before.get(n, [])), n
    return None, None


def rank(xs, q):
    """Nearest-rank percentile (q in 0..100)."""
    s = sorted(xs)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def bucket_of(bs, cnt, q):
    """(lo, hi] of the bucket holding the q-th percentile of the histogram."""
    k = max(1, math.ceil(q / 100 * cnt))
    lo = 0.0
    for le, c in bs:
        if c >= k:
            return lo, le
        lo = le
    return lo, float("inf")


def compare(name, h, vals_s, say):
    bs, cnt, tot = h
    say(f"{name}: vLLM histogram count {cnt:.0f}, mean {tot / cnt * 1000:.2f} ms; "
        f"mbench {len(vals_s)} requests, mean {statistics.fmean(vals_s) * 1000:.2f} ms")
    worst = 0.0
    for le, c in bs:
        if math.isinf(le):
            continue
        mine = sum(1 for v in vals_s if v <= le) / len(vals_s)
        theirs = c / cnt
        if abs(mine - theirs) > 0 or 0.0 < theirs < 1.0:
            say(f"  le {le * 1000:9.1f} ms: vLLM {theirs:6.1%}  mbench {mine:6.1%}")
        worst = max(worst, abs(mine - theirs))
    ok = True
    for q in (50, 90, 99):
        lo, hi = bucket_of(bs, cnt, q)
        v = rank(vals_s, q)
        inb = lo < v <= hi
        ok &= inb
        say(f"  p{q}: mbench {v * 1000:.2f} ms; vLLM's bucket ({lo * 1000:.1f}, {hi * 1000:.1f}] ms: "
            f"{'in it' if inb else 'OUTSIDE'}")
    say(f"  largest difference of the two CDFs at a bucket bound: {worst:.1%}; "
        f"{'AGREE' if ok else 'DIFFER'} within the buckets")
    return ok


def steps_check(path, say, iterations=None):
    from mbench_vllm import steplog

    errs = []
    recs = steplog.read(path, errs)
    status = [r for r in recs if r.get("status") == "engine"]
    steps = [r for r in recs if "step_duration_us" in r]
    gpu_lines = [r for r in recs if "gpu_us" in r and "step_duration_us" not in r]
    say(f"step log {path}: {len(steps)} steps, {len(status)} status lines, {len(gpu_lines)} late GPU lines, "
        f"{len(errs)} malformed")
    if status:
        s = status[-1]
        say("  status: " + json.dumps({k: s.get(k) for k in ("vllm", "path", "gpu_time", "gpu_hook", "gpu_sample_every",
                                                             "gpu_reason", "timers", "incomplete")}))
    if not steps:
        return
    bq = sum(1 for r in steps if r.get("batch_queue") == 1)
    parts = ("schedule_us", "execute_us", "launch_us", "wait_us", "update_us")
    bad = 0
    for r in steps:
        tot = sum(r.get(k, 0.0) for k in parts) + r.get("unaccounted_us", 0.0)
        if abs(tot - r["step_duration_us"]) > 0.01:
            bad += 1
    dur = [r["step_duration_us"] for r in steps]
    un = [r.get("unaccounted_us", 0.0) / r["step_duration_us"] for r in steps if r["step_duration_us"] > 0]
    say(f"  path: {bq} of {len(steps)} lines on the batch queue; identity (parts + unaccounted = step) "
        f"broken on {bad} lines")
    say(f"  step_duration_us p50 {statistics.median(dur):.1f}, p90 {rank(dur, 90):.1f}; unaccounted share "
        f"p50 {statistics.median(un):.2%}, p90 {rank(un, 90):.2%}, max {max(un):.2%}")
    for k in parts + ("build_meta_us", "get_finished_us"):
        xs = [r[k] for r in steps if k in r]
        if xs:
            say(f"  {k}: on {len(xs)} lines, p50 {statistics.median(xs):.1f} us, p90 {rank(xs, 90):.1f}")
    gl = [r for r in steps + gpu_lines if "gpu_us" in r]
    hb = [r for r in gl if r.get("gpu_host_bound") == 1]
    meas = [r["gpu_us"] for r in gl if r.get("gpu_host_bound") != 1]
    say(f"  gpu_us on {len(gl)} lines: {len(meas)} measured (p50 {statistics.median(meas) if meas else float('nan'):.1f} "
        f"us), {len(hb)} host-bound (span p50 {statistics.median([r['gpu_us'] for r in hb]) if hb else float('nan'):.1f} us)")
    sched = [r for r in steps if r.get("num_prefill_tokens", 0) + r.get("num_decode_tokens", 0) > 0]
    if iterations is not None:
        say(f"  steps that scheduled tokens: {len(sched)}; vLLM's vllm:iteration_tokens_total count over the run: "
            f"{iterations:.0f}")


def load(d):
    lines = []
    say = lambda s: (lines.append(s), print(s))
    before, after = parse(os.path.join(d, "metrics-before.txt")), parse(os.path.join(d, "metrics-after.txt"))
    recs = [json.loads(l) for l in open(os.path.join(d, "out", "requests.jsonl")) if l.strip()]
    ok_recs = [r for r in recs if r.get("status") == "ok"]
    say(f"mbench load: {len(recs)} requests, {len(ok_recs)} ok (phases: "
        f"{sorted(set(r.get('phase') for r in recs))})")
    ttft = [(r["first_token_ns"] - r["sent_ns"]) / 1e9 for r in ok_recs]
    e2el = [(r["done_ns"] - r["sent_ns"]) / 1e9 for r in ok_recs]
    tpot = [(r["last_token_ns"] - r["first_token_ns"]) / 1e9 / (r["output_tokens"] - 1)
            for r in ok_recs if r["output_tokens"] > 1]
    verdict = {}
    for label, names, vals in (
        ("TTFT", ("vllm:time_to_first_token_seconds",), ttft),
        ("TPOT", ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"), tpot),
        ("E2EL", ("vllm:e2e_request_latency_seconds",), e2el),
    ):
        for n in names:
            h = hist(before, after, n)
            if h and h[1] > 0:
                verdict[label] = compare(f"{label} ({n})", h, vals, say)
                break
        else:
            say(f"{label}: none of {names} in /metrics")
    itl = hist(before, after, "vllm:inter_token_latency_seconds")
    if itl:
        say(f"ITL (vllm:inter_token_latency_seconds): {itl[1]:.0f} gaps, mean {itl[2] / itl[1] * 1000:.3f} ms; "
            f"mbench: {sum(len(r.get('itl_ms') or []) for r in ok_recs)} gaps, mean "
            f"{statistics.fmean([g for r in ok_recs for g in (r.get('itl_ms') or [])] or [float('nan')]):.3f} ms")
    q = hist(before, after, "vllm:request_queue_time_seconds")
    if q and q[1]:
        say(f"queue: vLLM's request_queue_time mean {q[2] / q[1] * 1000:.2f} ms over {q[1]:.0f} requests, "
            f"p90 bucket {tuple(round(x * 1000, 1) for x in bucket_of(q[0], q[1], 90))} ms")
    hits, hn = counter(before, after, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits")
    qs, qn = counter(before, after, "vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries")
    cached = [r.get("cached_tokens") for r in ok_recs if r.get("cached_tokens") is not None]
    say(f"prefix cache: vLLM {hn} {hits}, {qn} {qs}; mbench cached_tokens on {len(cached)} requests, "
        f"sum {sum(cached) if cached else 0}; prompt tokens sent {sum(r['input_tokens'] for r in ok_recs)}")
    succ, sn = counter(before, after, "vllm:request_success_total")
    say(f"requests: vLLM {sn} {succ}; mbench ok {len(ok_recs)}")
    it = hist(before, after, "vllm:iteration_tokens_total")
    steps_check(os.path.join(d, "engine_step.jsonl"), say, it[1] if it else None)
    say("verdict: " + ", ".join(f"{k} {'agrees' if v else 'DIFFERS'}" for k, v in verdict.items()))


def sweep(d):
    say = print
    for root, _, files in sorted(os.walk(d)):
        if "engine_step.jsonl" in files:
            say(f"== {os.path.relpath(root, d)}")
            steps_check(os.path.join(root, "engine_step.jsonl"), say)


if __name__ == "__main__":
    {"load": load, "sweep": sweep}[sys.argv[1]](sys.argv[2])
