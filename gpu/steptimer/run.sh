#!/usr/bin/env bash
# The H200 proof of the step timer's GPU time, its costs, and the step-log
# ingest. Run on the GPU machine from the repository root:
#
#     bash gpu/steptimer/run.sh
#
# Needs python3 with torch (CUDA) and pytest, nothing else (no vLLM, no
# network, no Go: the ingest benchmark runs from a test binary built
# beforehand, `go test -c -o .devbin/probes.test ./probes`, carried as the
# ignored path .devbin). Takes about 3-4 minutes. Writes under $OUT
# (default /tmp/steptimer-out), 7 files:
#   gpu.txt       the device, CPU model, clock source, CPU count, Python
#   proof.txt     gpu_us against the torch profiler per batch (8 cases), each
#                 with where any excess lies (the profiler trace: host time
#                 from the start-event record to the first launch, launch to
#                 kernel start) and gpu_us without the profiler; the GPU
#                 timer's engine-thread cost; the idle-GPU start gap of the
#                 bare product; engine-thread ns per CUDA-event call
#   proof.json    the same, machine-readable
#   steps.tar.gz  the 16 step logs (binary step records)
#   overhead.txt  the plugin's engine-thread and wall cost per step on vLLM's
#                 control flow (paired chunks), and the machine's speed at
#                 what the wrappers do
#   pytest.txt    the plugin's test suite with a real torch present
#   ingest.txt    mbench steps' ingest of fresh JSONL lines and binary
#                 records: lines per CPU-second, per wall-second, x-baseline,
#                 calib-ns (machine speed), steal-%
# Exit status: 0 when every case passes and the suite passes.
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/steptimer-out}"
mkdir -p "$OUT"
export PYTHONDONTWRITEBYTECODE=1
rc=0
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  grep -m1 "model name" /proc/cpuinfo; grep -m1 "cpu MHz" /proc/cpuinfo
  echo "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  nproc; python3 -V; } > "$OUT/gpu.txt" 2>&1
PYTHONPATH=vllm:vllm/tests timeout 150 python3 gpu/steptimer/h200_proof.py --out "$OUT" 2>&1 \
  | grep -v -e "UserWarning: Warning: Profiler clears" -e "^  _warn_once" | tee "$OUT/proof.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
(cd vllm && timeout 90 python3 tests/bench_overhead.py 30000 256 1024) 2>&1 | tee "$OUT/overhead.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
# The suite and the ingest benchmark side by side (16 cores; the benchmark
# measures its own thread's CPU time).
(cd vllm && timeout 150 python3 -m pytest -q -p no:cacheprovider tests) > "$OUT/pytest.txt" 2>&1 &
pyt=$!
if [ -x .devbin/probes.test ]; then
  (cd probes && timeout 150 ../.devbin/probes.test -test.run XXX -test.bench 'BenchmarkSummarizeStepsFresh' \
    -test.benchtime 1x -test.cpu 2) > "$OUT/ingest.txt" 2>&1 || rc=1
  grep -E "^Benchmark|^cpu:" "$OUT/ingest.txt"
else
  echo "no .devbin/probes.test: ingest benchmark skipped" | tee "$OUT/ingest.txt"
fi
wait "$pyt" || rc=1
tail -3 "$OUT/pytest.txt"
echo "run.sh: exit $rc"
exit $rc
