#!/usr/bin/env bash
# Packs what gpu/vllm/run.sh needs to run real vLLM under mbench on the GPU
# machine (no network there; a device call carries at most 64 MiB with the
# working tree), in pieces of at most PIECE_MIB (default 56) MiB:
#
#   vllm-$V-core.tar.xz         vLLM $V's wheel, unpacked, without what a dense
#                               model does not load: the FlashAttention 2 and
#                               MoE extensions (FA3 goes apart), FlashMLA,
#                               QuTLASS, the Rust front end and the vendored
#                               DeepGEMM/FMHA sources (third_party goes apart)
#   vllm-$V-third_party.tar.xz  vllm/third_party without those (pynvml.py and
#                               the Triton kernels are imported)
#   vllm-$V-fa3.zip             FlashAttention 3's extension alone: on CUDA,
#                               vllm/v1/attention/backends/fa_utils.py imports
#                               vllm.vllm_flash_attn, which raises ImportError
#                               without FA2 or FA3 (the first H200 call, 2026-12-03)
#   wheels/*.whl                vLLM's dependencies the machine's image lacks
#                               (gpu/vllm/wheels.txt, pinned; cp312 manylinux)
#   mbench.xz                   mbench built here (cgo, NVML)
#   src/                        gpu/vllm/ and the plugin vllm/ of this checkout
#
# all in one tar, split into OUT/p1/part-00, OUT/p2/part-01, ...: one folder
# per device call. Downloads are cached in ~/.cache/mbench/vllm-pack.
#
# Why vLLM 0.26.0 (docs/vllm.md, "Real vLLM on the H200"): 0.18.1's wheel pins
# torch==2.10.0 and its _C.abi3.so is built against torch 2.10's C++ ABI (433
# MB); the machine has torch 2.11.0+cu130. 0.26.0 is the newest release that
# pins torch==2.11.0 (0.27.0 pins 2.13.0), its wheel is CUDA 13
# (nvidia-cutlass-dsl[cu13]) and its kernels use torch's stable ABI
# (_C_stable_libtorch.abi3.so).
#
# Usage: gpu/vllm/pack.sh [--out DIR] [--version V]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpu-vllm
V=0.26.0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --version) V=$2; shift 2 ;;
    *) echo "usage: gpu/vllm/pack.sh [--out DIR] [--version V]" >&2; exit 64 ;;
  esac
done
piece=$((${PIECE_MIB:-56} << 20))
cache=${MBENCH_VLLM_PACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mbench/vllm-pack}
mkdir -p "$cache/wheels"
plat=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64)
for n in $(seq 5 39); do plat+=(--platform "manylinux_2_${n}_x86_64"); done
pipdl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" "$@"; }

whl=$(ls "$cache"/vllm-"$V"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$whl" ]; then
  echo "pack: pip download vllm==$V" >&2
  pipdl -d "$cache" "vllm==$V"
  whl=$(ls "$cache"/vllm-"$V"-*.whl | head -1)
fi
if [ ! -f "$cache/vllm-$V-core.tar.xz" ] || [ ! -f "$cache/vllm-$V-third_party.tar.xz" ]; then
  echo "pack: unpacking and compressing vLLM $V (xz: minutes on 2 cores)" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir "$tmp/core" "$tmp/tp"
  (cd "$tmp/core" && unzip -q "$whl" -x 'vllm/vllm_flash_attn/*.so' 'vllm/_moe_C*' 'vllm/third_party/*' \
    'vllm/vllm-rs' 'vllm/_flashmla*.so' 'vllm/_qutlass_C.abi3.so')
  (cd "$tmp/tp" && unzip -q "$whl" 'vllm/third_party/*' -x 'vllm/third_party/deep_gemm/*' 'vllm/third_party/fmha_sm100/*')
  (cd "$tmp/core" && tar -cf - .) | xz -6 -T0 >"$cache/vllm-$V-core.tar.xz.tmp"
  (cd "$tmp/tp" && tar -cf - vllm) | xz -6 -T0 >"$cache/vllm-$V-third_party.tar.xz.tmp"
  mv "$cache/vllm-$V-core.tar.xz.tmp" "$cache/vllm-$V-core.tar.xz"
  mv "$cache/vllm-$V-third_party.tar.xz.tmp" "$cache/vllm-$V-third_party.tar.xz"
fi
if [ ! -f "$cache/vllm-$V-fa3.zip" ]; then
  echo "pack: FlashAttention 3's extension (vllm/vllm_flash_attn imports it on CUDA)" >&2
  python3 - "$whl" "$cache/fa3.tmp.zip" <<'PY'
import sys, zipfile
src, dst = sys.argv[1:]
name = "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"
with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as o:
    o.writestr(z.getinfo(name), z.read(name))
PY
  mv "$cache/fa3.tmp.zip" "$cache/vllm-$V-fa3.zip"
fi
echo "pack: dependency wheels (gpu/vllm/wheels.txt)" >&2
pipdl -d "$cache/wheels" -r gpu/vllm/wheels.txt

stage=$(mktemp -d)
trap 'rm -rf "$stage" ${tmp:+"$tmp"}' EXIT
pay=$stage/payload
mkdir -p "$pay/wheels" "$pay/src"
cp "$cache/vllm-$V-core.tar.xz" "$cache/vllm-$V-third_party.tar.xz" "$cache/vllm-$V-fa3.zip" "$pay/"
# Only the pinned wheels (the cache may hold other versions).
python3 - "$cache/wheels" "$pay/wheels" gpu/vllm/wheels.txt <<'EOF'
import os, re, shutil, sys
src, dst, lst = sys.argv[1:]
norm = lambda s: re.sub(r"[-_.]+", "_", s.lower())
want = {}
for line in open(lst):
    line = line.split("#")[0].strip()
    if line:
        n, v = line.split("==")
        want[norm(n)] = v
got = set()
for f in os.listdir(src):
    parts = f.split("-")
    n, v = norm(parts[0]), parts[1]
    if want.get(n) == v:
        shutil.copy(os.path.join(src, f), dst)
        got.add(n)
missing = sorted(set(want) - got)
if missing:
    sys.exit(f"pack: wheels missing after download: {missing}")
EOF
echo "$V" >"$pay/VLLM_VERSION"
export CGO_CFLAGS=-Wno-deprecated-declarations
if [ -n "${MBENCH_BIN:-}" ]; then # a build of this checkout made beforehand
  cp "$MBENCH_BIN" "$stage/mbench"
else
  go build -trimpath -ldflags='-s -w' -o "$stage/mbench" ./cmd/mbench
fi
xz -6 -T0 -c "$stage/mbench" >"$pay/mbench.xz"
git rev-parse HEAD >"$pay/MBENCH_COMMIT"
cp -r gpu/vllm "$pay/src/gpu-vllm"
mkdir -p "$pay/src/vllm"
cp -r vllm/mbench_vllm vllm/mbench_vllm-0.1.0.dist-info vllm/pyproject.toml "$pay/src/vllm/"
find "$pay/src" -name __pycache__ -prune -exec rm -rf {} +

rm -rf "$out"
mkdir -p "$out"
(cd "$pay" && tar -cf - .) | split -b "$piece" -d -a 2 - "$stage/part-"
i=0
for p in "$stage"/part-*; do
  i=$((i + 1))
  mkdir -p "$out/p$i"
  mv "$p" "$out/p$i/"
done
sha256sum "$out"/p*/part-* | sed "s| $out/p[0-9]*/| |" >"$out/SHA256SUMS"
cp "$out/SHA256SUMS" "$out/p$i/"
du -sh "$pay"/* "$out"/p* >&2
rel=${out#"$PWD"/}
{
  echo "# gpu/vllm/pack.sh: vLLM $V in $i pieces. Each device call carries one folder (the working tree"
  echo "# travels too: keep it small); call them within 30 s of each other, so /tmp stays."
  for j in $(seq 1 "$i"); do
    if [ "$j" -lt "$i" ]; then
      echo "run  carry: [\"$rel/p$j\"]  command: mkdir -p /tmp/mbench-vllm/parts && cp $rel/p$j/part-* /tmp/mbench-vllm/parts/ && nvidia-smi -L && df -h /tmp | tail -1"
    else
      echo "run  carry: [\"$rel/p$j\"]  timeout_s: 600  command: mkdir -p /tmp/mbench-vllm/parts /tmp/mbench-vllm/pay && cp $rel/p$j/* /tmp/mbench-vllm/parts/ && cd /tmp/mbench-vllm/parts && sha256sum -c SHA256SUMS && cat part-* | tar -x -C ../pay && OUT=\$OUT bash ../pay/src/gpu-vllm/run.sh"
    fi
  done
} >"$out/device-commands.txt"
cat "$out/device-commands.txt" >&2
