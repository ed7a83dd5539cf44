"""Reads a result file the way scripts written for `vllm bench serve
--save-result` read it: vLLM's keys with vLLM's types, nothing of mbench's.

Usage: read_vllm_result.py FILE PERCENTILES METRICS
Prints one CSV row (model_id, request_rate, max_concurrency, completed,
failed, request_throughput, output_throughput, total_token_throughput,
p<q>_<metric>_ms...) or exits non-zero with what is missing.
"""
import json
import sys

path, pcts, metrics = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
with open(path) as f:
    r = json.load(f)

for key, typ in [
    ("date", str), ("backend", str), ("endpoint_type", str), ("label", str),
    ("model_id", str), ("tokenizer_id", str), ("num_prompts", int),
    ("burstiness", (int, float)), ("duration", (int, float)), ("completed", int),
    ("failed", int), ("total_input_tokens", int), ("total_output_tokens", int),
    ("request_throughput", (int, float)), ("output_throughput", (int, float)),
    ("total_token_throughput", (int, float)), ("max_output_tokens_per_s", (int, float)),
    ("max_concurrent_requests", int),
]:
    if not isinstance(r[key], typ) or isinstance(r[key], bool):
        sys.exit(f"{key}: {r[key]!r} is not {typ}")
rate = r["request_rate"]
if not (rate == "inf" or isinstance(rate, (int, float))):
    sys.exit(f"request_rate: {rate!r}")
if r["max_concurrency"] is not None and not isinstance(r["max_concurrency"], int):
    sys.exit(f"max_concurrency: {r['max_concurrency']!r}")
if "request_goodput" not in r:
    sys.exit("request_goodput: missing")
row = [r["model_id"], str(rate), str(r["max_concurrency"]), str(r["completed"]),
       str(r["failed"]), "%.3f" % r["request_throughput"],
       "%.3f" % r["output_throughput"], "%.3f" % r["total_token_throughput"]]
for m in metrics:
    for stat in ("mean", "median", "std"):
        float(r[f"{stat}_{m}_ms"])
    for p in pcts:
        q = float(p)
        word = str(int(q)) if int(q) == q else str(q)  # as vLLM names it
        row.append("%.3f" % r[f"p{word}_{m}_ms"])
print(",".join(row))
