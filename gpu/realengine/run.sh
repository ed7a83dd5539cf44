#!/usr/bin/env bash
# GPU proof of the real engine, for the H200 machine (16 cores, nvcc 13,
# cmake, ninja, python3; no network). In one device call, under 9 minutes:
#   1. builds llama.cpp's llama-server with CUDA from the sources that
#      gpu/realengine/pack.sh packed into .gpu-realengine/ (about 4 minutes);
#   2. writes a random-weight llama of 8 blocks × 512 (60 M parameters,
#      241 MB) with the carried tinyllama;
#   3. runs a short mbench sweep on it — 8 slots against 1 and an A/A copy
#      of the 8 slots, at 4 req/s, 2 blocks, the GPU gate on, NVML sampled
#      every 100 ms — with nvidia-smi sampling beside it;
#   4. writes under $OUT: run.log (this script's steps and timings),
#      report.md (mbench's), runs.tsv (every run: verdict, TTFT, TPOT, lost
#      requests, and its GPU figures from NVML), gpu-run.jsonl (one run's NVML
#      series), nvidia-smi.csv, engine-timings.tsv (llama-server's own
#      per-request timings from its logs) and checks.txt (NVML against
#      nvidia-smi over each run's window, TTFT against the engine's prompt
#      evaluation, requests lost).
#
# The lead runs, after gpu/realengine/pack.sh here:
#   run  command: bash gpu/realengine/run.sh   carry: [".gpu-realengine"]   timeout_s: 600
#
# --cpu runs steps 2-4 on this machine instead (no GPU, no build: the
# llama-server of llamacpp/build-llama-server.sh, a tiny model, no gate), to
# test the script; OUT defaults to /tmp/mbench-gpu-realengine-out there.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=gpu
[ "${1:-}" = --cpu ] && mode=cpu
if [ "$mode" = cpu ]; then : "${OUT:=/tmp/mbench-gpu-realengine-out}"; fi
: "${OUT:?set OUT to the directory for the results}"
mkdir -p "$OUT"
C=$PWD/.gpu-realengine
W=${WORK:-/tmp/mbench-gpu-realengine}
T0=$(date +%s)
log() { printf '[%4ds] %s\n' $(($(date +%s) - T0)) "$*" | tee -a "$OUT/run.log" >&2; }
: >"$OUT/run.log"
for f in "$C/bin/mbench" "$C/bin/tinyllama"; do
  [ -x "$f" ] || { log "missing $f: run gpu/realengine/pack.sh first and carry .gpu-realengine"; exit 1; }
done
rm -rf "$W"
mkdir -p "$W"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

if [ "$mode" = gpu ]; then
  log "machine: $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader); $(nvcc --version | tail -1)"
  commit=$(cat "$C/llama-commit")
  mkdir -p "$W/llama"
  tar -xJf "$C/llama-src.tar.xz" -C "$W/llama"
  log "llama.cpp ${commit:0:12}: cmake (CUDA, sm_90, static, no flash-attention kernels)"
  cmake -S "$W/llama" -B "$W/llama/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_NUMBER=1 -DLLAMA_BUILD_COMMIT="${commit:0:7}" >"$W/cmake.log" 2>&1 || { tail -30 "$W/cmake.log" | tee -a "$OUT/run.log"; exit 1; }
  log "ninja llama-server -j$(nproc)"
  ninja -C "$W/llama/build" -j"$(nproc)" llama-server >"$W/build.log" 2>&1 || { grep -m1 -A20 'error' "$W/build.log" | tee -a "$OUT/run.log"; tail -20 "$W/build.log" | tee -a "$OUT/run.log"; exit 1; }
  server=$W/llama/build/bin/llama-server
  # cuBLAS and the CUDA runtime are shared libraries of the toolkit (or of
  # the image's Python CUDA wheels): make them findable for the server that
  # mbench starts (it inherits this environment).
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 -c 'import glob, os, nvidia; print(" ".join(sorted({os.path.dirname(p) for b in nvidia.__path__ for p in glob.glob(b + "/*/lib/lib*.so*")})))' 2>/dev/null); do
    [ -d "$d" ] && LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
  done
  export LD_LIBRARY_PATH
  if ldd "$server" | grep -q 'not found'; then
    log "llama-server misses libraries: $(ldd "$server" | grep 'not found' | tr -s ' \n\t' ' ')"
  fi
  log "built: $("$server" --version 2>&1 | grep -m1 version)"
  modelargs=(-layers 8 -width 512 -heads 8)
  gpus="gpus: [0]"
  topo=""
  ngl="-ngl 99"
  rates="[4]"   # one rate: with the A/A copy, 6 runs fit the 9 minutes beside the build
  slots=8
  gate="{enabled: true, timeout: 10s, temp_band_c: 5}"
else
  server=${LLAMA_SERVER:-$(bash llamacpp/build-llama-server.sh)}
  modelargs=()
  gpus="gpus: []"
  topo=", topology: {gpus_per_instance: 0}"
  ngl="-t 1"
  rates="[2, 8]"
  slots=4
  gate="{enabled: false}"
fi

# Whole script within 9 minutes: a build that ran long leaves one block.
blocks=2
if [ $(($(date +%s) - T0)) -gt 300 ]; then
  blocks=1
  log "the build took $(($(date +%s) - T0)) s: one block instead of two, to end within 9 minutes"
fi

"$C/bin/tinyllama" -out "$W/model.gguf" "${modelargs[@]}" 2>>"$OUT/run.log" >/dev/null
log "model: $(stat -c %s "$W/model.gguf") bytes (tinyllama ${modelargs[*]:-defaults, the CI model})"

cat >"$W/matrix.yaml" <<YAML
# Written by gpu/realengine/run.sh: llama-server on the machine's GPU.
name: llamacpp-$mode
seed: 20261201
hosts:
  local: {address: local, $gpus}
engine:
  kind: llamacpp
  command: >-
    $server -m {{.Model}} --host {{.Bind}} --port {{.Port}} --metrics --no-webui -c 16384 $ngl {{.ConfigArgs}}
  model: $W/model.gguf
  port: 18400
  ready_timeout: 3m
  grace: 10s
  restart: every_run     # one engine log per run, so check.py holds each run to its engine's own timings
configs:
  np$slots: {args: [--parallel, "$slots"]$topo}
  np1: {args: [--parallel, "1"]$topo}
  np${slots}_aa: {same_as: np$slots}   # A/A control: its comparison is the noise floor
rates: $rates
shapes:
  - {name: 256x64, input: 256, output: 64}
measure: {warmup_requests: 8, min_completed: 48, timeout: 60s, drain_timeout: 30s}
repeat: {min: $blocks, max: $blocks, metric: ttft_p90}
baseline: np$slots
compare: [ttft_p90, tpot_p90, e2el_p90]
gate: $gate
probe: {interval: 100ms}
YAML

smi=""
if [ "$mode" = gpu ]; then
  TZ=UTC nvidia-smi --query-gpu=timestamp,utilization.gpu,power.draw,memory.used,clocks.sm,temperature.gpu \
    --format=csv,nounits -lms 200 >"$OUT/nvidia-smi.csv" 2>&1 &
  smi=$!
fi
log "mbench run (2 configs and an A/A copy × rates $rates × $blocks blocks)"
set +e
"$C/bin/mbench" run "$W/matrix.yaml" --out "$W/sweep" >"$W/mbench.out" 2>&1
rc=$?
set -e
[ -n "$smi" ] && kill "$smi" 2>/dev/null || true
log "mbench exit $rc (0: every run a result; 3: some runs not results, see report.md)"
grep -E '^\[[0-9]+/[0-9]+\] .*(ttft|NOT A RESULT)' "$W/mbench.out" | tee -a "$OUT/run.log" >&2 || true
cp "$W/sweep/report.md" "$OUT/report.md" 2>/dev/null || tail -30 "$W/mbench.out" | tee -a "$OUT/run.log"
python3 gpu/realengine/check.py "$W/sweep" "$OUT" | tee -a "$OUT/run.log" >&2
log "done"
