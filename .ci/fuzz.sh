#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded time each.
set -euo pipefail
t=${1:-10s}
export CGO_CFLAGS=-Wno-deprecated-declarations
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "== fuzz $pkg $f ($t)"
    out=$(mktemp)
    # Go's fuzz coordinator can give up with "context deadline exceeded"
    # when the time runs out while a worker is still minimizing a new input
    # (up to -fuzzminimizetime, 60 s by default; held to 1 s here) or on a
    # loaded 2-core machine misses its shutdown; that is not a finding, and
    # the target is run again, up to three times in all. A real finding
    # ("Failing input written to …") fails at once.
    for try in 1 2 3; do
      if go test "$pkg" -run '^$' -fuzz "^$f\$" -fuzztime "$t" -fuzzminimizetime 1s 2>&1 | tee "$out"; then
        break
      fi
      if [ "$try" = 3 ] || ! grep -q 'context deadline exceeded' "$out" || grep -q 'Failing input written' "$out"; then
        rm -f "$out"
        exit 1
      fi
      echo "== fuzz $f: the coordinator timed out without a finding; again"
    done
    rm -f "$out"
  done
done
