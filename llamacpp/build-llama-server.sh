#!/usr/bin/env bash
# Builds llama.cpp's llama-server on this machine from two npm packages, without
# compiling llama.cpp's libraries (a full build takes more than 40 minutes on 2
# cores; this takes about 4):
#   node-llama-cpp@V            ships llama.cpp's full source as llama/gitRelease.bundle
#   @node-llama-cpp/linux-x64@V ships the matching prebuilt libggml*, libllama,
#                               libllama-common shared libraries
# `npm pack` fetches each tarball without running install scripts. cmake only
# configures the source tree (for compile_commands.json and the UI stub); the
# script then compiles llama-server's own sources (tools/server, tools/mtmd,
# tools/ui's stub, vendor/cpp-httplib, common's build-info) with those exact
# flags and links them to the prebuilt libraries.
#
# The result lives in a cache directory keyed by version and is reused while it
# still runs:  $MBENCH_LLAMA_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/mbench/llama-server)
#              /<version>/bin/llama-server   (beside its libraries)
#              /<version>/npm/*.tgz          (the two tarballs, reused by gpu/realengine/pack.sh)
#              /<version>/commit             (the llama.cpp commit of the bundle)
# On success the path of llama-server is the only line on stdout; progress
# goes to stderr. Nothing of llama.cpp is written into the repository.
#
# With --source DIR the server's sources come from DIR (a llama.cpp tree of
# the same commit, such as the one gpu/realengine/pack.sh packs) and the
# result goes to DIR/build-prebuilt/bin, not to the cache.
#
# Usage: llamacpp/build-llama-server.sh [--version V] [--jobs N] [--force] [--source DIR]
set -euo pipefail

version=3.21.1
jobs=$(nproc)
force=0
source=
while [ $# -gt 0 ]; do
  case "$1" in
    --version) version=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --force) force=1; shift ;;
    --source) source=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-llama-server: unknown argument $1 (want --version V, --jobs N, --force, --source DIR)" >&2; exit 2 ;;
  esac
done
case "$version" in
  *[!0-9.]*|'') echo "build-llama-server: --version $version is not a version like 3.21.1" >&2; exit 2 ;;
esac

root=${MBENCH_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mbench/llama-server}
dir=$root/$version
[ -n "$source" ] && dir=$source/build-prebuilt
mkdir -p "$root"
log() { echo "build-llama-server: $*" >&2; }

# One build per version at a time: a second caller waits, then reuses it.
exec 9>"$root/$version.lock"
flock 9

works() { [ -x "$1/bin/llama-server" ] && "$1/bin/llama-server" --version >/dev/null 2>&1; }
if [ "$force" = 0 ] && works "$dir"; then
  log "reusing $dir/bin/llama-server ($(cat "$dir/commit" 2>/dev/null || echo '?'))"
  echo "$dir/bin/llama-server"
  exit 0
fi

for t in npm git cmake ninja python3 c++ tar flock; do
  command -v "$t" >/dev/null || { log "needs $t on PATH"; exit 1; }
done

start=$(date +%s)
work=$(mktemp -d "$root/.build-$version.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/npm"
if [ -f "$dir/npm/node-llama-cpp-$version.tgz" ] && [ -f "$dir/npm/node-llama-cpp-linux-x64-$version.tgz" ]; then
  cp "$dir"/npm/*.tgz "$work/npm/"
else
  log "npm pack node-llama-cpp@$version @node-llama-cpp/linux-x64@$version"
  (cd "$work/npm" && npm pack --silent "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version" >/dev/null)
fi
mkdir -p "$work/pkg" "$work/libpkg"
tar -xzf "$work/npm/node-llama-cpp-$version.tgz" -C "$work/pkg" package/llama/gitRelease.bundle
tar -xzf "$work/npm/node-llama-cpp-linux-x64-$version.tgz" -C "$work/libpkg"
if [ -n "$source" ]; then
  ln -s "$source" "$work/src"
  commit=$(cat "$source/.commit" 2>/dev/null || echo "the tree at $source")
else
  git clone -q "$work/pkg/package/llama/gitRelease.bundle" "$work/src" 2>/dev/null
  commit=$(git -C "$work/src" rev-parse HEAD)
fi
log "llama.cpp source $commit"
lib=$(echo "$work"/libpkg/package/bins/linux-x64)
[ -f "$lib/libllama-common.so" ] || { log "no libllama-common.so in @node-llama-cpp/linux-x64@$version"; exit 1; }

log "cmake configure (no library is compiled)"
cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$work/cmake.log" 2>&1 || { tail -20 "$work/cmake.log" >&2; exit 1; }
# The UI stub (ui.cpp/ui.h, empty with the UI off) comes from a small host tool.
ninja -C "$work/build" tools/ui/llama-ui-assets >"$work/ui.log" 2>&1 || { tail -20 "$work/ui.log" >&2; exit 1; }

# The compile commands of llama-server's own sources: the server (all three
# targets), mtmd (linked by the server; built -O1 since only --mmproj runs it),
# cpp-httplib, the UI stub and common's build-info.
python3 - "$work/build/compile_commands.json" "$work/cmds" <<'PY'
import json, sys
keep = ("/tools/server/CMakeFiles/", "/tools/mtmd/CMakeFiles/mtmd.dir/",
        "/vendor/cpp-httplib/CMakeFiles/", "/tools/ui/CMakeFiles/llama-ui.dir/",
        "/common/CMakeFiles/llama-common-base.dir/", "/vendor/hash/CMakeFiles/")
objs, cmds = [], []
for e in json.load(open(sys.argv[1])):
    cmd = e["command"]
    out = cmd.split(" -o ", 1)[1].split(" ", 1)[0]
    if not any(k in "/" + out for k in keep):
        continue
    if "/mtmd.dir/" in out:
        cmd = cmd.replace(" -O3 ", " -O1 ")
    cmds.append("cd %s && %s" % (e["directory"], cmd))
    objs.append(e["directory"] + "/" + out)
open(sys.argv[2], "w").write("\0".join(cmds))
open(sys.argv[2] + ".objs", "w").write("\n".join(objs) + "\n")
PY
n=$(tr -cd '\0' <"$work/cmds" | wc -c); n=$((n + 1))
log "compiling $n sources with $jobs jobs"
(cd "$work/build" && for o in $(cat "$work/cmds.objs"); do mkdir -p "$(dirname "$o")"; done)
xargs -0 -P "$jobs" -n 1 bash -c 'eval "$0" >>'"$work/compile.log"' 2>&1 || { echo "FAILED: $0" >>'"$work/compile.log"'; exit 255; }' <"$work/cmds" \
  || { grep -B2 -A20 -m1 'error' "$work/compile.log" >&2 || tail -30 "$work/compile.log" >&2; exit 1; }

log "linking against the prebuilt libraries"
mkdir -p "$work/out/bin"
cp -a "$lib"/lib*.so "$work/out/bin/"
# shellcheck disable=SC2046
c++ -O3 -o "$work/out/bin/llama-server" $(cat "$work/cmds.objs") \
  "$work/out/bin/libllama-common.so" "$work/out/bin"/libllama.v*.so "$work/out/bin"/libggml.v*.so \
  "$work/out/bin/libggml-base.so" -lpthread -Wl,-rpath,'$ORIGIN' 2>"$work/link.log" \
  || { tail -30 "$work/link.log" >&2; exit 1; }
echo "$commit" >"$work/out/commit"
cp -a "$work/npm" "$work/out/npm"
works "$work/out" || { log "the built llama-server does not run:"; "$work/out/bin/llama-server" --version >&2 || true; exit 1; }
rm -rf "$dir.old"
[ -e "$dir" ] && mv "$dir" "$dir.old"
mv "$work/out" "$dir"
rm -rf "$dir.old"
log "built $dir/bin/llama-server in $(( $(date +%s) - start )) s: $("$dir/bin/llama-server" --version 2>&1 | grep -m1 version)"
echo "$dir/bin/llama-server"
