#!/usr/bin/env bash
# Packs what gpu/realengine/run.sh needs on the GPU machine (no network
# there, at most 64 MiB carried) into .gpu-realengine/ at the repository
# root (git-ignored):
#   llama-src.tar.xz   llama.cpp's source as node-llama-cpp@VERSION ships it,
#                      cut to what llama-server's CUDA build needs: the top
#                      CMake files and cmake/, include/, src/, common/,
#                      vendor/, tools/ (the UI's npm sources and the test media
#                      left out), scripts/ui-assets.cmake, and ggml with only
#                      its CPU and CUDA backends
#   llama-commit       the bundle's commit (the build is stamped with it)
#   bin/mbench, bin/tinyllama   built here (static Go, cgo for NVML)
# Run it on this machine (npm reachable, or the build cache of
# llamacpp/build-llama-server.sh already holding the tarball); it prints
# the size carried and the command for the device.
#
# Usage: gpu/realengine/pack.sh [--version V]
set -euo pipefail
cd "$(dirname "$0")/../.."
version=3.21.1
[ "${1:-}" = --version ] && version=$2
out=.gpu-realengine
root=${MBENCH_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mbench/llama-server}
tgz=$root/$version/npm/node-llama-cpp-$version.tgz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ ! -f "$tgz" ]; then
  echo "pack: npm pack node-llama-cpp@$version" >&2
  (cd "$work" && npm pack --silent "node-llama-cpp@$version" >/dev/null)
  tgz=$work/node-llama-cpp-$version.tgz
fi
tar -xzf "$tgz" -C "$work" package/llama/gitRelease.bundle
git clone -q "$work/package/llama/gitRelease.bundle" "$work/src" 2>/dev/null
commit=$(git -C "$work/src" rev-parse HEAD)
rm -rf "$out"
mkdir -p "$out/bin"
(
  cd "$work/src"
  {
    ls CMakeLists.txt LICENSE
    echo cmake; echo include; echo src; echo common; echo vendor; echo licenses
    echo scripts/ui-assets.cmake
    ls -d tools/* | grep -v '^tools/ui$'
    echo tools/ui/CMakeLists.txt; echo tools/ui/embed.cpp; echo tools/ui/sources.cmake
    echo ggml/CMakeLists.txt; echo ggml/cmake; echo ggml/include
    find ggml/src -maxdepth 1 -type f
    echo ggml/src/ggml-cpu; echo ggml/src/ggml-cuda
  } >"$work/list"
  tar -cf - --exclude='tools/mtmd/test-*' --exclude='tools/server/tests' --exclude='tools/server/bench' -T "$work/list"
) | xz -6 -T0 >"$out/llama-src.tar.xz"
echo "$commit" >"$out/llama-commit"
export CGO_CFLAGS=-Wno-deprecated-declarations
go build -trimpath -ldflags='-s -w' -o "$out/bin/mbench" ./cmd/mbench
go build -trimpath -ldflags='-s -w' -o "$out/bin/tinyllama" ./cmd/tinyllama
du -sh "$out" "$out"/* "$out"/bin/* >&2
total=$(du -sb "$out" | cut -f1)
if [ "$total" -gt $((60 << 20)) ]; then
  echo "pack: $out is $total bytes, too close to the 64 MiB a device call carries" >&2
  exit 1
fi
cat >&2 <<MSG
pack: done (llama.cpp $commit). On the GPU machine, one call:
  run  command: bash gpu/realengine/run.sh   carry: [".gpu-realengine"]   timeout_s: 600
MSG
