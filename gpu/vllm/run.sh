#!/usr/bin/env bash
# Real vLLM under mbench on the H200 machine (python3 with torch 2.11 CUDA 13,
# no network), from the pieces gpu/vllm/pack.sh made, in one device call:
#
#   1. checks and reassembles the pieces (/tmp/mbench-vllm/parts, put there by
#      the calls before this one; see pack.sh) and installs vLLM and the
#      carried wheels with pip install --no-index --no-deps --target;
#   2. writes a random-weight Llama and its tokenizer (gpu/vllm/model.py);
#   3. python -m mbench_vllm.check (hooks, async-scheduling default, timers);
#   4. one vllm serve of its own with the step-timer plugin (every forward
#      GPU-timed), /metrics scraped before and after an `mbench load` run with
#      no warm-up: check.py holds mbench's TTFT/TPOT/E2EL to vLLM's own
#      histograms, the step log to the step's wall time and to vLLM's
#      iteration count, and records readiness and teardown;
#   5. an mbench sweep of seed 000's first rows (microbench3.yaml's plain and
#      noop_connector, and plain's A/A twin), engine.instrument: true, vLLM's
#      default async scheduling; then no process left and the GPU's memory.
#
# Writes under $OUT: run.log, check.txt, report.md, steps.txt (mbench steps of
# each sweep run), load-summary.json, metrics-delta.txt, out.tar.gz (the
# sweep's journal, summaries and step logs; the load run's files).
set -uo pipefail
: "${OUT:?set OUT}"
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)            # payload/src
pay=$(cd "$src/.." && pwd)             # payload
W=${WORK:-/tmp/mbench-vllm}
S=$W/site
T0=$(date +%s)
BUDGET=${BUDGET_S:-560}
log() { printf '[%4ds] %s\n' $(($(date +%s) - T0)) "$*" | tee -a "$OUT/run.log" >&2; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
: >"$OUT/run.log"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
# vLLM 0.26.0's sampler imports FlashInfer (not carried: flashinfer-python and
# its JIT caches) unless told not to: vllm/v1/sample/ops/topk_topp_sampler.py
# L44 imports vllm.v1.attention.backends.flashinfer, whose first line imports
# flashinfer; ModuleNotFoundError there fails the engine core's start (the
# second H200 call, 2026-12-03). Every engine here, mbench's included,
# inherits this.
export VLLM_USE_FLASHINFER_SAMPLER=0

V=$(cat "$pay/VLLM_VERSION")
log "machine: $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader)"
log "python: $(python3 -V 2>&1) $(command -v python3); $(python3 -c 'import torch, transformers, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "triton", triton.__version__)' 2>&1 | tail -1)"

if [ ! -f "$S/.installed-$V" ]; then
  rm -rf "$S"
  mkdir -p "$S"
  log "pip install --no-index --no-deps --target $S: $(ls "$pay"/wheels/*.whl | wc -l) wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$S" "$pay"/wheels/*.whl \
    >"$W/pip.log" 2>&1 || { tail -20 "$W/pip.log" | tee -a "$OUT/run.log"; exit 1; }
  log "vLLM $V: unpacking the trimmed wheel into $S"
  xz -dc -T0 "$pay/vllm-$V-core.tar.xz" | tar -x -C "$S" || exit 1
  xz -dc -T0 "$pay/vllm-$V-third_party.tar.xz" | tar -x -C "$S" || exit 1
  python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$pay/vllm-$V-fa3.zip" "$S" || exit 1
  touch "$S/.installed-$V"
fi
export PYTHONPATH=$S
export PATH=$W/bin:$PATH
mkdir -p "$W/bin"
xz -dc "$pay/mbench.xz" >"$W/bin/mbench" && chmod +x "$W/bin/mbench"
# `vllm` for mbench's engine command: vLLM's own CLI entry point.
printf '#!/bin/sh\nexec python3 -c "import sys; from vllm.entrypoints.cli.main import main; sys.argv[0] = \\"vllm\\"; sys.exit(main())" "$@"\n' >"$W/bin/vllm"
chmod +x "$W/bin/vllm"
log "vllm: $(python3 -c 'import vllm; print(vllm.__version__)' 2>&1 | tail -1); mbench $(cat "$pay/MBENCH_COMMIT" | cut -c1-12)"

# Every module the server's start imports, before any server: a missing
# package ends the call here, named, instead of in six engine logs.
python3 -c "import vllm.entrypoints.openai.api_server, vllm.v1.engine.core, vllm.v1.worker.gpu_model_runner, vllm.v1.attention.backends.flash_attn, vllm.v1.attention.backends.triton_attn" >"$W/imports.log" 2>&1 ||
  { log "vLLM does not import: $(grep -E 'Error' "$W/imports.log" | tail -2 | tr '\n' ' ')"; tail -15 "$W/imports.log" >>"$OUT/run.log"; exit 1; }
if [ ! -f "$W/model/config.json" ]; then # an earlier call of this machine wrote it
  log "model: random-weight llama"
  python3 "$here/model.py" "$W/model" --layers ${LAYERS:-16} --width ${WIDTH:-2048} --heads 16 2>&1 | grep -v Warning | tee -a "$OUT/run.log"
fi

if [ "${SKIP_LOAD:-0}" != 1 ]; then
  log "mbench_vllm.check"
  (cd "$src/vllm" && PYTHONPATH=$src/vllm:$S timeout 120 python3 -m mbench_vllm.check) >"$OUT/check-plugin.txt" 2>&1
  log "check exit $?: $(head -3 "$OUT/check-plugin.txt" | tr '\n' ' ')"
fi

# EAGER=0: vLLM's default CUDA graphs (captured at start: a slower start),
# where a forward is a graph replay rather than hundreds of launches.
ARGS="$([ "${EAGER:-1}" = 1 ] && echo --enforce-eager) --gpu-memory-utilization 0.3 --max-model-len 8192 --enable-prefix-caching"
# ---------------------------------------------------------------- 4. load vs vLLM's own account
if [ "${SKIP_LOAD:-0}" != 1 ]; then
  L=$W/load
  rm -rf "$L"
  mkdir -p "$L"
  log "vllm serve (plugin on, MBENCH_GPU_TIME=all) for the load check"
  t_start=$(date +%s.%N)
  # VLLM_USE_V2_MODEL_RUNNER=0: 0.26.0 runs dense models on the V2 model
  # runner by default, where the plugin cannot time forwards (no
  # _model_forward); the V1 runner here, so GPU time is measured. The sweep
  # keeps vLLM's default.
  PYTHONPATH=$src/vllm:$S MBENCH_STEP_LOG=$L/engine_step.jsonl MBENCH_GPU_TIME=all VLLM_USE_V2_MODEL_RUNNER=${LOAD_V2:-0} \
    setsid vllm serve "$W/model" --port 18600 $ARGS >"$L/engine.log" 2>&1 &
  vpid=$!
  ready=""
  for _ in $(seq 1 360); do
    if curl -sf localhost:18600/health >/dev/null 2>&1; then ready=$(date +%s.%N); break; fi
    kill -0 $vpid 2>/dev/null || break
    sleep 0.5
  done
  status_before_ready=$(head -c 4096 "$L/engine_step.jsonl" 2>/dev/null | grep -c '"status":"engine"' || true)
  if [ -z "$ready" ]; then
    log "vllm serve did not become ready; its log:"
    tail -40 "$L/engine.log" | tee -a "$OUT/run.log"
  else
    log "ready after $(python3 -c "print(round($ready - $t_start, 1))") s; status lines in the step log at readiness: $status_before_ready"
    curl -s localhost:18600/metrics >"$L/metrics-before.txt"
    curl -s localhost:18600/v1/models >"$L/models.json"
    mbench load --url http://127.0.0.1:18600 --rate ${LOAD_RATE:-4} --input 4096 --output 256 --requests ${LOAD_N:-120} \
      --warmup 0 --seed 7 --out "$L/out" >"$L/load.out" 2>&1
    log "mbench load exit $?: $(tail -3 "$L/load.out" | tr '\n' ' ')"
    sleep 1.5  # the engine's last stats and the plugin's flush (0.5 s)
    curl -s localhost:18600/metrics >"$L/metrics-after.txt"
  fi
  t_stop=$(date +%s.%N)
  kill -TERM -- -$vpid 2>/dev/null
  for _ in $(seq 1 60); do kill -0 $vpid 2>/dev/null || break; sleep 0.5; done
  gone=$(date +%s.%N)
  sleep 1
  {
    echo "teardown: SIGTERM to the server's process group; leader gone after $(python3 -c "print(round($gone - $t_stop, 1))") s"
    echo "processes left: $(pgrep -af 'vllm|EngineCore' | grep -v -e pgrep -e run.sh | wc -l) $(pgrep -af 'vllm|EngineCore' | grep -v -e pgrep -e run.sh | head -3 | tr '\n' ';')"
    echo "GPU after: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader); compute apps: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | wc -l)"
  } >"$L/teardown.txt"
  cat "$L/teardown.txt" | tee -a "$OUT/run.log"
  if [ -n "$ready" ]; then
    PYTHONPATH=$src/vllm python3 "$here/check.py" load "$L" "$W/bin/mbench" >"$OUT/check.txt" 2>&1
    log "check.py load exit $?"
    cp "$L/out/summary_A.json" "$OUT/load-summary.json" 2>/dev/null
  fi
fi

# ---------------------------------------------------------------- 5. the sweep
SW=$W/sweep
if [ "${SKIP_SWEEP:-0}" = 1 ]; then
  log "SKIP_SWEEP=1: no sweep in this call"
elif [ "$(left)" -lt 150 ]; then
  log "$(left) s left: no sweep"
elif [ "${RESUME:-0}" = 1 ] && [ -f "$SW/sweep.json" ]; then
  # A sweep an earlier call's time limit interrupted (exit 130): resumed
  # exactly as planned, from the journal, on the same machine.
  log "mbench resume (the sweep an earlier call interrupted), $(left) s left"
  timeout -s INT $(($(left) - 25)) mbench resume "$SW" >>"$W/mbench.out" 2>&1
  rc=$?
  log "mbench resume exit $rc"
else
  rm -rf "$SW"
  cat >"$W/matrix.yaml" <<YAML
# Written by gpu/vllm/run.sh: seed 000's first rows (microbench3.yaml's plain
# and noop_connector, and an A/A twin of plain) on real vLLM $V, one H200.
name: vllm-h200
seed: 20261203
hosts:
  local: {address: local, gpus: [0]}
engine:
  kind: vllm
  command: >-
    vllm serve {{.Model}} --port {{.Port}} $ARGS {{.ConfigArgs}}
  model: $W/model
  port: 18700
  instrument: true
  ready_timeout: 4m
  grace: 20s
  # vLLM 0.26 runs dense models on its V2 model runner, where the plugin
  # cannot time forwards; the V1 runner (async scheduling still vLLM's
  # default) so that every step's GPU time is measured. SWEEP_V2=1 keeps
  # vLLM's default runner.
  env: {VLLM_USE_V2_MODEL_RUNNER: "${SWEEP_V2:-0}"}
configs:
  plain: {}
  plain_aa: {same_as: plain}
  noop_connector:
    kv_transfer_config:
      kv_connector: MbenchNoopConnector
      kv_connector_module_path: mbench_vllm.noop
      kv_role: kv_both
rates: [${SWEEP_RATE:-4}]
shapes:
  - {name: 4096x256, input: 4096, output: 256}
measure: {warmup_requests: 8, min_completed: ${SWEEP_N:-40}, timeout: 90s, drain_timeout: 30s}
repeat: {min: ${SWEEP_BLOCKS:-3}, max: ${SWEEP_BLOCKS:-3}, metric: ttft_p90}
baseline: plain
compare: [ttft_p90, tpot_p90, e2el_p90]
gate: {enabled: false}
probe: {interval: 100ms}
YAML
  log "mbench run (3 configs x 1 rate x ${SWEEP_BLOCKS:-3} blocks), $(left) s left"
  timeout -s INT $(($(left) - 25)) mbench run "$W/matrix.yaml" --out "$SW" >"$W/mbench.out" 2>&1
  rc=$?
  log "mbench run exit $rc"
fi
if [ -f "$SW/sweep.json" ]; then
  grep -E '^\[[0-9]+/[0-9]+\]' "$W/mbench.out" | tee -a "$OUT/run.log" >&2
  tail -5 "$W/mbench.out" | tee -a "$OUT/run.log" >&2
  cp "$SW/report.md" "$OUT/report.md" 2>/dev/null
  sleep 2
  {
    echo "after the sweep: processes left: $(pgrep -af 'vllm|EngineCore' | grep -v -e pgrep -e run.sh | wc -l)"
    echo "GPU after: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader); compute apps: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | wc -l)"
  } | tee -a "$OUT/run.log"
  for f in $(find "$SW" -name engine_step.jsonl | sort); do
    echo "== ${f#$SW/}"
    mbench steps "$f" 2>&1 | head -40
  done >"$OUT/steps.txt" 2>&1
  PYTHONPATH=$src/vllm python3 "$here/check.py" sweep "$SW" >>"$OUT/check.txt" 2>&1
fi
tar -czf "$OUT/out.tar.gz" -C "$W" --exclude='*.safetensors' load sweep matrix.yaml mbench.out pip.log 2>/dev/null
log "done"
