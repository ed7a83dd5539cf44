#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded time each.
set -euo pipefail
t=${1:-10s}
export CGO_CFLAGS=-Wno-deprecated-declarations
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "== fuzz $pkg $f ($t)"
    go test "$pkg" -run '^$' -fuzz "^$f\$" -fuzztime "$t"
  done
done
