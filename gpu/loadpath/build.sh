#!/usr/bin/env bash
# Builds, on the development machine, what run.sh runs on the GPU machine
# (which has no Go): gpu/loadpath/bin/mbench (with NVML, cgo) and
# gpu/loadpath/bin/openloop.test (the load generator's benchmarks), stripped:
# about 37 MB, under the 64 MiB a device call carries. bin/ is git-ignored.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CGO_CFLAGS=-Wno-deprecated-declarations
mkdir -p gpu/loadpath/bin
go build -ldflags='-s -w' -o gpu/loadpath/bin/mbench ./cmd/mbench
go test -c -ldflags='-s -w' -o gpu/loadpath/bin/openloop.test ./openloop
git rev-parse HEAD > gpu/loadpath/bin/COMMIT
du -sh gpu/loadpath/bin/*
