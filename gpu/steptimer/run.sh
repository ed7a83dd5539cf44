#!/usr/bin/env bash
# The H200 proof of the step timer's GPU time, its costs, and the step-log
# ingest. Run on the GPU machine from the repository root:
#
#     bash gpu/steptimer/run.sh          everything (about 3-4 minutes)
#     bash gpu/steptimer/run.sh timers   what the C timers changed (about 2-3 minutes)
#     bash gpu/steptimer/run.sh cost     the engine-thread costs alone (about 3 minutes): the
#                                        step timers' overhead with nothing beside it, and the
#                                        GPU timer's (every forward; the default sampling)
#     bash gpu/steptimer/run.sh overhead the step timers' overhead alone, one process per
#                                        measurement (PROCS rounds, default 6, of both versions
#                                        at 256 and 1,024 running: about 25 s a process there),
#                                        summarized as the median over processes with its
#                                        interval (tests/bench_overhead.py --procs); no GPU needed
#
# Needs python3 with torch (CUDA) and pytest, nothing else (no vLLM, no
# network, no Go: the ingest benchmark runs from a test binary built
# beforehand, `go test -c -o .devbin/probes.test ./probes`, carried as the
# ignored path .devbin). The plugin's C timers (vllm/mbench_vllm/_fastwrap.c)
# are built here with gcc and this Python's headers; where the headers are
# missing, headers of the same Python major.minor carried in
# .devbin/python3.<minor>-include are used (MBENCH_VLLM_PYINCLUDE), else the
# Python wrappers run and every file says so. Writes under $OUT (default
# /tmp/steptimer-out):
#   gpu.txt       the device, CPU model, clock source, CPU count, Python,
#                 gcc, which headers, and which timers were built
#   proof.txt     gpu_us against the torch profiler per batch (8 cases; with
#                 "timers" the two main batch-queue ones), each with where
#                 any excess lies (the profiler trace: host time from the
#                 start-event record to the first launch, launch to kernel
#                 start) and gpu_us without the profiler; the GPU timer's
#                 engine-thread cost; (all only) the idle-GPU start gap of
#                 the bare product and engine-thread ns per CUDA-event call
#   proof.json    the same, machine-readable
#   steps.tar.gz  the step logs (binary step records)
#   overhead.txt  the plugin's engine-thread and wall cost per step on vLLM's
#                 control flow (paired chunks), C timers, and ("timers") the
#                 Python wrappers beside them; the machine's speed at what
#                 the wrappers do
#   pytest.txt    the plugin's test suite (both timer implementations) with a
#                 real torch present
#   ingest.txt    (all only) mbench steps' ingest of fresh JSONL lines and
#                 binary records: lines per CPU-second, per wall-second,
#                 x-baseline, calib-ns (machine speed), steal-%
# Exit status: 0 when every case passes and the suite passes.
set -u
cd "$(dirname "$0")/../.."
MODE="${1:-all}"
case "$MODE" in all | timers | cost | overhead) ;; *) echo "usage: run.sh [all|timers|cost|overhead]" >&2; exit 64 ;; esac
OUT="${OUT:-/tmp/steptimer-out}"
mkdir -p "$OUT"
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 MBENCH_VLLM_NATIVE=1
export MBENCH_VLLM_CACHE="${MBENCH_VLLM_CACHE:-/tmp/mbench_vllm_cache}"
inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
carried=".devbin/python3.$(python3 -c 'import sys; print(sys.version_info[1])')-include"
if [ ! -f "$inc/Python.h" ] && [ -f "$carried/Python.h" ]; then
  export MBENCH_VLLM_PYINCLUDE="$PWD/$carried"
fi
rc=0
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  grep -m1 "model name" /proc/cpuinfo; grep -m1 "cpu MHz" /proc/cpuinfo
  echo "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  nproc; python3 -V; gcc --version 2>&1 | head -1
  echo "Python.h in $inc: $([ -f "$inc/Python.h" ] && echo present || echo ABSENT)" \
    "${MBENCH_VLLM_PYINCLUDE:+(using the carried $MBENCH_VLLM_PYINCLUDE)}"
  (cd vllm && python3 -c 'from mbench_vllm import native; native.load(want_build=True); print(native.status())')
} > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
if [ "$MODE" = overhead ]; then
  (cd vllm && BENCH_CHUNKS=40 timeout "${OVERHEAD_S:-570}" python3 tests/bench_overhead.py --procs "${PROCS:-6}" 20000 256 1024) \
    2>&1 | tee "$OUT/overhead.txt"
  rc=${PIPESTATUS[0]}
  echo "run.sh: exit $rc"
  exit "$rc"
fi
if [ "$MODE" = timers ]; then
  proof_args=(--cases main:batch_queue:gpu_bound,main:batch_queue:cpu_bound --quick)
elif [ "$MODE" = cost ]; then
  proof_args=(--cases none --quick --cost-chunks 80)
else
  proof_args=()
fi
PYTHONPATH=vllm:vllm/tests timeout 150 python3 gpu/steptimer/h200_proof.py --out "$OUT" "${proof_args[@]}" 2>&1 \
  | grep -v -e "UserWarning: Warning: Profiler clears" -e "^  _warn_once" | tee "$OUT/proof.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
# The suite beside the benchmarks (16 cores; they measure their own thread's
# CPU time, as paired chunks), after the GPU proof; "cost" runs the
# benchmark alone.
pyt=""
if [ "$MODE" != cost ]; then
  (cd vllm && timeout 240 python3 -m pytest -q -p no:cacheprovider tests) > "$OUT/pytest.txt" 2>&1 &
  pyt=$!
fi
(cd vllm && timeout 120 python3 tests/bench_overhead.py 30000 256 1024) 2>&1 | tee "$OUT/overhead.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
if [ "$MODE" = timers ]; then # the Python wrappers, same machine, same run
  (cd vllm && MBENCH_VLLM_NATIVE=0 BENCH_CHUNKS=40 timeout 60 python3 tests/bench_overhead.py 8000 256 1024) 2>&1 \
    | grep -v "^machine:" | tee -a "$OUT/overhead.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
elif [ "$MODE" = cost ]; then
  :
elif [ -x .devbin/probes.test ]; then
  (cd probes && timeout 150 ../.devbin/probes.test -test.run XXX -test.bench 'BenchmarkSummarizeStepsFresh' \
    -test.benchtime 1x -test.cpu 2) > "$OUT/ingest.txt" 2>&1 || rc=1
  grep -E "^Benchmark|^cpu:" "$OUT/ingest.txt"
else
  echo "no .devbin/probes.test: ingest benchmark skipped" | tee "$OUT/ingest.txt"
fi
if [ -n "$pyt" ]; then
  wait "$pyt" || rc=1
  tail -3 "$OUT/pytest.txt"
fi
echo "run.sh: exit $rc"
exit $rc
