#!/usr/bin/env python3
"""Holds an mbench sweep against llama-server to what the engine and the GPU
say beside mbench: llama-server's own per-request timings (its log, one per
run: the sweep restarts the engine every run) and nvidia-smi's samples over
each run's window. Writes runs.tsv, engine-timings.tsv, gpu-run.jsonl and
checks.txt into OUT.

Usage: check.py SWEEP_DIR OUT_DIR
"""
import datetime
import glob
import json
import os
import re
import statistics
import sys

sweep, out = sys.argv[1], sys.argv[2]
checks = []


def say(line):
    checks.append(line)
    print(line)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


journal = [json.loads(l) for l in open(os.path.join(sweep, "journal.jsonl")) if l.strip()]
PROMPT = re.compile(r"id\s+(\d+) \| task (\d+) \| prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")
EVAL = re.compile(r"task (\d+) \|\s+eval time =\s+([\d.]+) ms /\s+(\d+) tokens")
SLOTS = re.compile(r"n_slots = (\d+)")


def timings(path):
    """[(task, prompt_ms, prompt_tokens, eval_ms, gen_tokens, first)] in log order, and the slots;
    first: the task is the first its slot served (the slot held no previous prompt for
    llama-server's prompt cache to save when it was picked)."""
    by, order, slots, seen = {}, [], None, set()
    for line in open(path, errors="replace"):
        m = SLOTS.search(line)
        if m and slots is None:
            slots = int(m.group(1))
        m = PROMPT.search(line)
        if m:
            by[m.group(2)] = [int(m.group(2)), float(m.group(3)), int(m.group(4)), None, None, m.group(1) not in seen]
            seen.add(m.group(1))
            order.append(m.group(2))
            continue
        m = EVAL.search(line)
        if m and m.group(1) in by:
            by[m.group(1)][3], by[m.group(1)][4] = float(m.group(2)), int(m.group(3))
    return [by[k] for k in order], slots


logs = sorted(glob.glob(os.path.join(sweep, ".state", "logs", "engine-local-0.*.log")),
              key=lambda p: int(p.rsplit(".", 2)[-2]))
smi = []
smi_path = os.path.join(out, "nvidia-smi.csv")
if os.path.exists(smi_path):
    for line in open(smi_path):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 6 or not f[0][:1].isdigit():
            continue
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
            smi.append((t, float(f[1]), float(f[2]), float(f[3])))
        except ValueError:
            pass

rows, etim = [], ["log\tslots\ttask\tprompt_tokens\tprompt_ms\tgen_tokens\teval_ms\tfirst_on_slot\tttft_minus_prompt_ms\tsend_to_head_ms"]
lost_total = sent_total = 0
lost_classes = {}
ttft_gap = []
if len(logs) != len(journal):
    say(f"NOTE: {len(logs)} engine logs for {len(journal)} runs: runs are matched to logs only when the counts agree")
gpu_run_written = False
for i, j in enumerate(journal):
    d = os.path.join(sweep, j["dir"])
    s = json.load(open(os.path.join(d, "summary_A.json")))
    recs = [json.loads(l) for l in open(os.path.join(d, "requests.jsonl")) if l.strip()]
    lost = [r for r in recs if r["status"] != "ok"]
    lost_total += len(lost)
    for r in lost:
        lost_classes[r.get("error_class", "?")] = lost_classes.get(r.get("error_class", "?"), 0) + 1
    sent_total += len(recs)
    g = (s.get("gpu") or {}).get("per_gpu") or [{}]
    g = g[0]
    w0, w1 = ts(s["window_start"]), ts(s["window_end"])
    win = [x for x in smi if w0 <= x[0] <= w1]
    smi_util = statistics.mean(x[1] for x in win) if win else float("nan")
    smi_pow = statistics.mean(x[2] for x in win) if win else float("nan")
    smi_mem = max((x[3] for x in win), default=float("nan"))
    nv = lambda k, a: (g.get(k) or {}).get(a, float("nan"))
    eng_prompt = eng_tok = float("nan")
    if len(logs) == len(journal):
        t, slots = timings(logs[i])
        gaps, heads = [""] * len(t), [""] * len(t)
        eng_prompt = med([x[1] for x in t])
        eng_tok = med([x[3] / (x[4] - 1) for x in t if x[3] is not None and x[4] and x[4] > 1])
        if f"np{slots}" != s["config"].removesuffix("_aa"):
            say(f"NOTE: run {j['dir']} is {s['config']} but its engine log says {slots} slots")
        if s["rate"] <= 4:  # no two requests at once: the log's order is the send order
            ok = sorted((r for r in recs if r["status"] == "ok"), key=lambda r: r["sent_ns"])
            if len(ok) == len(t):
                for k, (r, x) in enumerate(zip(ok, t)):
                    gaps[k] = (r["first_token_ns"] - r["sent_ns"]) / 1e6 - x[1]
                    # the response head goes out when the slot starts on the prompt
                    # (just after the engine's prompt clock starts): send -> head is
                    # what comes before that clock, the rest of the gap what follows it
                    heads[k] = (r["head_ns"] - r["sent_ns"]) / 1e6 if r.get("head_ns") else ""
                    ttft_gap.append((gaps[k], x[5], heads[k]))
        for x, gap, head in zip(t, gaps, heads):
            etim.append(f"{os.path.basename(logs[i])}\t{slots}\t{x[0]}\t{x[2]}\t{x[1]}\t{x[4]}\t{x[3]}\t{int(x[5])}\t"
                        + (f"{gap:.3f}" if gap != "" else "") + "\t" + (f"{head:.3f}" if head != "" else ""))
    rows.append([s["config"], s["rate"], s["block"], j["status"], s["completed"], len(lost),
                 s.get("median_ttft_ms"), s.get("p90_ttft_ms"), eng_prompt, s.get("median_tpot_ms"), eng_tok,
                 nv("util_gpu", "mean"), nv("util_gpu", "max"), smi_util, nv("power_w", "mean"), smi_pow,
                 nv("mem_used_mib", "max"), smi_mem, g.get("energy_j"), len(win),
                 nv("mem_reserved_mib", "max"), g.get("mem_source", "?")])
    if not gpu_run_written and s["config"] != "np1" and s["rate"] >= 4:
        src = os.path.join(d, "gpu.jsonl")
        if os.path.exists(src):
            with open(os.path.join(out, "gpu-run.jsonl"), "w") as f:
                f.write(open(src).read())
            gpu_run_written = True

head = ["config", "rate", "block", "verdict", "completed", "failed", "ttft_p50_ms", "ttft_p90_ms", "engine_prompt_p50_ms",
        "tpot_p50_ms", "engine_ms_per_token_p50", "nvml_util_mean", "nvml_util_max", "smi_util_mean", "nvml_power_mean_w",
        "smi_power_mean_w", "nvml_mem_max_mib", "smi_mem_max_mib", "nvml_energy_j", "smi_samples",
        "nvml_mem_reserved_max_mib", "nvml_mem_source"]


def fmt(v):
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.3f}"
    return str(v)


with open(os.path.join(out, "runs.tsv"), "w") as f:
    f.write("\t".join(head) + "\n")
    for r in rows:
        f.write("\t".join(fmt(v) for v in r) + "\n")
with open(os.path.join(out, "engine-timings.tsv"), "w") as f:
    f.write("\n".join(etim) + "\n")

say(f"requests: {sent_total} sent over {len(rows)} runs, {lost_total} failed"
    + (f" (by class: {lost_classes}; 'drained' = cut by measure.drain_timeout in a saturated run, not lost)" if lost_total else ""))
if ttft_gap:
    allg = [g for g, _, _ in ttft_gap]
    say(f"TTFT - engine prompt eval, runs at ≤ 4 req/s, {len(allg)} requests: median {med(allg):.3f} ms, "
        f"min {min(allg):.3f}, max {max(allg):.3f} (must be > 0: no first token before its prompt is evaluated)")
    first, rest = [g for g, f, _ in ttft_gap if f], [g for g, f, _ in ttft_gap if not f]
    say(f"  the same, requests first on their slot (no previous prompt for the prompt cache to save): {len(first)}, "
        f"median {med(first):.3f} ms; the others: {len(rest)}, median {med(rest):.3f} ms")
    split = [(h, g - h) for g, _, h in ttft_gap if h != ""]
    if split:
        say(f"  split at the response head (sent when the slot starts on the prompt): send -> head median "
            f"{med([a for a, _ in split]):.3f} ms (before the engine's prompt clock), the rest median "
            f"{med([b for _, b in split]):.3f} ms (head -> first token minus prompt eval)")
for r in rows:
    say(f"{r[0]} rate {r[1]} b{r[2]} {r[3]}: TTFT p50 {fmt(r[6])} ms vs engine prompt eval p50 {fmt(r[8])} ms; "
        f"TPOT p50 {fmt(r[9])} vs engine {fmt(r[10])} ms/token; GPU util NVML {fmt(r[11])}% (max {fmt(r[12])}) vs nvidia-smi {fmt(r[13])}%; "
        f"power {fmt(r[14])} vs {fmt(r[15])} W; memory max {fmt(r[16])} vs {fmt(r[17])} MiB ({r[19]} nvidia-smi samples; "
        f"NVML {r[21]}, reserved {fmt(r[20])} MiB)")
with open(os.path.join(out, "checks.txt"), "w") as f:
    f.write("\n".join(checks) + "\n")
