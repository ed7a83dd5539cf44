#!/usr/bin/env bash
# Runs the fault tests of cmd/mbench (kill -9 and resume, engine crash,
# Ctrl-C, Ctrl-C at every instant of a launch, disk full) and the process
# lifecycle tests of orchestrator/hosts with two CPU hogs running beside
# them, as on a busy machine: the tests must wait on events, not on time.
# The hogs are killed when the script ends, however it ends.
# Usage: .ci/faults-under-load.sh [extra go test flags]
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_CFLAGS=-Wno-deprecated-declarations
hogs=()
stop_hogs() {
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${hogs[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop_hogs EXIT
for _ in 1 2; do
  sh -c 'while :; do :; done' &
  hogs+=($!)
done
echo "== two CPU hogs running (pids ${hogs[*]}); load: $(cut -d' ' -f1-3 /proc/loadavg)"
go test -count=1 -timeout 20m "$@" ./cmd/mbench -run '^TestFault'
go test -count=1 -timeout 10m "$@" ./orchestrator/hosts -run 'AtAnyInstant|FirstInstant|StopDeadlineUnderLoad|StartStop|Leftovers|Kill9|Escaped'
echo "== done; load: $(cut -d' ' -f1-3 /proc/loadavg)"
