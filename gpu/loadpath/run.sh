#!/usr/bin/env bash
# The load generator's quiet-machine measurements, on the GPU machine (16
# cores, one H200), from the repository root, with the binaries build.sh made
# here carried in gpu/loadpath/bin. About 5 minutes. Results under $OUT:
#   log.txt          everything below, as it ran
#   cpu_bench.txt    BenchmarkStreamedRequestCPU: client pinned to CPUs 0,1,
#                    stub on 2-5; 16 tokens at 2,000 req/s, and 128 and 16
#                    tokens (2 ms apart) at 500 req/s (per extra chunk); io=reactor (default),
#                    io=reactor-eachwake (no coalescing), io=goroutines, and
#                    the floor client's io=floor and io=floor-uring
#   syscall.txt      BenchmarkBareSyscall: one getppid(2), the entry and exit
#                    that every read pays
#   cpu.prof         a CPU profile of the reactor at 2,000 req/s (go tool pprof)
#   bench_separate.txt / .json  bench-load, client on 0,1, stub on 2-5,
#                    mbench and the vLLM client reconstruction
#   bench_shared.txt / .json    the same with the stub on the client's 0,1
#   energy.json      NVML's energy counter against integrated power over a
#                    torch matmul load step (mbench probe's own samples)
# RUNS, DUR (bench-load), BENCH_DUR and ROUNDS (CPU benchmark) shorten it for
# a try on another machine; CPU_ONLY=1 stops after the CPU benchmark; without
# torch the energy step is skipped.
set -uo pipefail
RUNS=${RUNS:-5} DUR=${DUR:-2s} BENCH_DUR=${BENCH_DUR:-3s}
CLIENT_CPUS=${CLIENT_CPUS:-0,1} STUB_CPUS=${STUB_CPUS:-2-5} PYTHON=${PYTHON:-python3}
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/loadpath-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
B=gpu/loadpath/bin
echo "commit $(cat $B/COMMIT 2>/dev/null); $(nproc) CPUs; $(uptime)"
grep -m1 'model name' /proc/cpuinfo
$PYTHON -c 'import aiohttp, sys; print("python", sys.version.split()[0], "aiohttp", aiohttp.__version__)'

# 0. Does pinning hold here (gVisor may take sched_setaffinity without
#    enforcing it)? Two processes spin 1 s of wall time each, both on CPU 0:
#    enforced, their CPU adds up to about 1 s; not, to about 2 s.
python3 - <<'PY'
import os, time, multiprocessing as mp
def spin(q):
    os.sched_setaffinity(0, {0})
    t0, c0 = time.time(), time.process_time()
    while time.time() - t0 < 1.0: pass
    q.put(time.process_time() - c0)
q = mp.Queue(); ps = [mp.Process(target=spin, args=(q,)) for _ in range(2)]
[p.start() for p in ps]; [p.join() for p in ps]
cpu = q.get() + q.get()
print(f"pin check: two spinners on CPU 0 used {cpu:.2f} CPU-s in 1 s: pinning {'enforced' if cpu < 1.5 else 'NOT enforced'}")
PY

# 1. Client CPU per streamed request, client on CLIENT_CPUS (0,1) and the
#    stub on STUB_CPUS (2-5), ROUNDS rounds of the three loads, each load
#    through every I/O mode: the load generator's (reactor, reactor-eachwake,
#    goroutines) and the floor client's (floor: a recvmsg per read and
#    nothing else; floor-uring: the same reads batched in one io_uring_enter
#    per wake). Every line is tagged with its load.
ROUNDS=${ROUNDS:-2}
export MBENCH_CLIENT_CPUS=$CLIENT_CPUS MBENCH_STUB_CPUS=$STUB_CPUS MBENCH_DURATION=$BENCH_DUR
uname -r; grep -H . /sys/devices/system/cpu/vulnerabilities/* 2>/dev/null | sed 's#.*/##' | tr '\n' ' '; echo
taskset -c ${CLIENT_CPUS%%,*} $B/openloop.test -test.run '^$' -test.bench 'BareSyscall' -test.benchtime=2000000x 2>&1 | grep -E '^Benchmark' | tee "$OUT/syscall.txt"
{
  for round in $(seq $ROUNDS); do
    for load in 2000x16x1ms 500x128x2ms 500x16x2ms; do
      IFS=x read -r rate tokens gap <<< "$load"
      MBENCH_RATE=$rate MBENCH_TOKENS=$tokens MBENCH_GAP=$gap $B/openloop.test -test.cpu 2 -test.run '^$' -test.bench 'StreamedRequestCPU' -test.benchtime=1x 2>&1 | sed "s/^/$load /"
    done
  done
  MBENCH_RATE=2000 MBENCH_TOKENS=16 MBENCH_GAP=1ms $B/openloop.test -test.cpu 2 -test.run '^$' -test.bench 'StreamedRequestCPU/io=reactor$' -test.benchtime=1x -test.cpuprofile "$OUT/cpu.prof" 2>&1 | sed "s/^/profiled /"
} 2>&1 | grep -E 'Benchmark|ok|FAIL|panic' | tee "$OUT/cpu_bench.txt"
unset MBENCH_CLIENT_CPUS MBENCH_STUB_CPUS MBENCH_DURATION
# Per I/O mode: CPU per request at 2,000 req/s × 16 tokens, and per extra
# chunk = (128 tokens − 16 tokens, both at 500 req/s) / 112, per round; the
# same for the system part.
python3 - "$OUT/cpu_bench.txt" <<'PY'
import re, sys
got = {}
for l in open(sys.argv[1]):
    m = re.match(r"(\S+) BenchmarkStreamedRequestCPU/io=([a-z-]+?)-[0-9]+\s", l)
    if not m or m.group(1) == "profiled":
        continue
    cpu = float(re.search(r"([0-9.]+) client-cpu-ms/req", l).group(1))
    sys_ = float(re.search(r"([0-9.]+) client-sys-ms/req", l).group(1))
    got.setdefault((m.group(2), m.group(1)), []).append((cpu, sys_))
for mode in ["reactor", "reactor-eachwake", "goroutines", "floor", "floor-uring"]:
    a, b, c = (got.get((mode, k), []) for k in ["2000x16x1ms", "500x128x2ms", "500x16x2ms"])
    chunk = [round(1e3 * (x[0] - y[0]) / 112, 2) for x, y in zip(b, c)]
    chunk_sys = [round(1e3 * (x[1] - y[1]) / 112, 2) for x, y in zip(b, c)]
    print(f"cpu {mode}: {[x[0] for x in a]} ms/req at 2000 req/s x 16 tokens (system {[x[1] for x in a]}); per extra chunk {chunk} us (system {chunk_sys})")
PY
if [ -n "${CPU_ONLY:-}" ]; then echo done; exit 0; fi

# 2. bench-load: 5 runs per rate, 2 s each, the clients interleaved; the
#    vLLM client reconstruction at the rates it can reach.
CMP=(--compare "$PYTHON gpu/loadpath/vllm_client.py" --compare-name vllm --compare-rates 100,300,1000)
$B/mbench bench-load --rates 100,300,1000,2000,4000 --runs $RUNS --duration $DUR --client-cpus $CLIENT_CPUS --stub-cpus $STUB_CPUS "${CMP[@]}" --json \
  > "$OUT/bench_separate.json" 2> "$OUT/bench_separate.txt"; echo "bench-load separate: exit $?"; cat "$OUT/bench_separate.txt" | tail -15
$B/mbench bench-load --rates 100,300,1000,2000 --runs $RUNS --duration $DUR --client-cpus $CLIENT_CPUS --stub-cpus $CLIENT_CPUS "${CMP[@]}" --json \
  > "$OUT/bench_shared.json" 2> "$OUT/bench_shared.txt"; echo "bench-load shared: exit $?"; cat "$OUT/bench_shared.txt" | tail -15

# 3. Energy: mbench probe every 100 ms for 16 s; idle 4 s, a bf16 matmul
#    burst of 6 s, idle again. energy.json: over the whole window and over
#    the burst, the counter's rise and the integral of the power readings.
if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo '{"skipped": "no torch with CUDA here"}' > "$OUT/energy.json"; echo "energy: skipped (no torch with CUDA)"; echo done; exit 0
fi
$B/mbench probe --interval 100ms --duration 16s --host-out none > "$OUT/gpu.jsonl" &
PROBE=$!
sleep 4
python3 - <<'PY'
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
torch.cuda.synchronize(); t0 = time.time()
open("/tmp/loadpath-burst", "w").write(f"{t0}\n")
while time.time() - t0 < 6:
    for _ in range(20): a @ b
    torch.cuda.synchronize()
open("/tmp/loadpath-burst", "a").write(f"{time.time()}\n")
PY
wait $PROBE
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
t0, t1 = [float(x) * 1e6 for x in open("/tmp/loadpath-burst").read().split()]
s = [json.loads(l) for l in open(f"{out}/gpu.jsonl") if l.strip()]
s = [x for x in s if x.get("gpu") == 0]
def window(a, b):
    w = [x for x in s if a <= x["ts_us"] <= b]
    integ = sum((q["ts_us"] - p["ts_us"]) / 1e6 * (p["power_w"] + q["power_w"]) / 2 for p, q in zip(w, w[1:]))
    cnt = None
    if w and "energy_mj" in w[0] and "energy_mj" in w[-1]:
        cnt = (w[-1]["energy_mj"] - w[0]["energy_mj"]) / 1e3
    return {"samples": len(w), "seconds": (w[-1]["ts_us"] - w[0]["ts_us"]) / 1e6 if w else 0,
            "counter_j": cnt, "integrated_j": integ,
            "integrated_over_counter": integ / cnt if cnt else None}
res = {"whole": window(0, 1e30), "burst": window(t0, t1), "burst_and_1s_after": window(t0, t1 + 1e6),
       "has_counter": any("energy_mj" in x for x in s), "errors": sorted({x.get("err", "") for x in s} - {""})}
json.dump(res, open(f"{out}/energy.json", "w"), indent=1)
print("energy:", json.dumps(res))
PY
rm -f "$OUT/gpu.jsonl"  # (kept small: energy.json has the figures)
echo done
