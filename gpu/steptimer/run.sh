#!/usr/bin/env bash
# The H200 proof of the step timer's GPU time (issue: GPU time measured, not
# inferred). Run on the GPU machine from the repository root:
#
#     bash gpu/steptimer/run.sh
#
# Needs python3 with torch (CUDA) and pytest, nothing else (no vLLM, no
# network, no Go: the step-log ingest benchmark runs from a test binary
# built here beforehand, `go test -c -o .devbin/probes.test ./probes`, carried
# as the ignored path .devbin). Takes about 3-5 minutes. Writes under $OUT
# (default /tmp/steptimer-out): gpu.txt (the device), proof.txt and
# proof.json (gpu_us against the torch profiler per batch, 8 cases),
# steps.tar.gz (their step logs), overhead.txt (the plugin's engine-thread
# cost per step on vLLM's control flow), pytest.txt (the plugin's test suite
# with a real torch present), ingest.txt (mbench steps' ingest of fresh
# batch-queue lines, lines per CPU-second). Exit status: 0 when every case
# passes and the suite passes.
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/steptimer-out}"
mkdir -p "$OUT"
export PYTHONDONTWRITEBYTECODE=1
rc=0
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nproc; python3 -V; } > "$OUT/gpu.txt" 2>&1
PYTHONPATH=vllm:vllm/tests timeout 300 python3 gpu/steptimer/h200_proof.py --out "$OUT" 2>&1 | tee "$OUT/proof.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
(cd vllm && timeout 200 python3 tests/bench_overhead.py 40000 256 1024) 2>&1 | tee "$OUT/overhead.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
(cd vllm && timeout 240 python3 -m pytest -q -p no:cacheprovider tests) > "$OUT/pytest.txt" 2>&1 || rc=1
tail -3 "$OUT/pytest.txt"
if [ -x .devbin/probes.test ]; then
  (cd probes && timeout 150 ../.devbin/probes.test -test.run XXX -test.bench 'BenchmarkSummarizeStepsFresh' \
    -test.benchtime 1x -test.cpu 2) > "$OUT/ingest.txt" 2>&1 || rc=1
  grep -E "^Benchmark|^cpu:" "$OUT/ingest.txt"
else
  echo "no .devbin/probes.test: ingest benchmark skipped" | tee "$OUT/ingest.txt"
fi
echo "run.sh: exit $rc"
exit $rc
