#!/usr/bin/env bash
# Soak benchmark (issue: no growth with run count): runs matrices/soak.yaml
# (2,000 short runs, one reused sim engine) and compares mbench's own RSS and
# open descriptors, recorded in every journal line, at run 2,000 with run 100.
# Passes when both are within 10%.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d)/soak}
./bin/mbench run matrices/soak.yaml --out "$out" --quiet >/dev/null || [ $? -eq 3 ]
python3 - "$out/journal.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
lines.sort(key=lambda e: e["finished"])
def at(n):
    e = lines[n - 1]["mbench"]
    return e["rss_kib"], e["fds"], e["goroutines"]
n = len(lines)
a, b = at(100), at(n)
print(f"runs: {n}")
print(f"run 100:  rss {a[0]/1024:.1f} MiB, fds {a[1]}, goroutines {a[2]}")
print(f"run {n}: rss {b[0]/1024:.1f} MiB, fds {b[1]}, goroutines {b[2]}")
r_rss, r_fd = b[0] / a[0], b[1] / a[1]
print(f"ratio run {n} / run 100: rss {r_rss:.3f}, fds {r_fd:.3f}")
sys.exit(0 if n >= 2000 and r_rss <= 1.10 and r_fd <= 1.10 else 1)
PY
