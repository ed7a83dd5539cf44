#!/usr/bin/env bash
# Takes down the multi-host test bed of .ci/netns-up.sh: its sshds, slurmds
# and slurmctld (by their pidfiles, never by name: the one-node cluster of
# .ci/slurm-up.sh keeps running), its namespaces, veths and bridge, and
# the files it wrote. Idempotent. Needs root.
set -uo pipefail
names=(mbn-n1 mbn-n2 mbn-n3 mbn-h1 mbn-h2 mbn-h3)
stop_pidfile() {
  [ -s "$1" ] || return 0
  local p
  p=$(cat "$1")
  if kill -0 "$p" 2>/dev/null; then
    kill "$p" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
  fi
  rm -f "$1"
}
for ns in "${names[@]}"; do stop_pidfile /run/mbn-sshd-$ns.pid; done
for n in mbn-n1 mbn-n2 mbn-n3; do stop_pidfile /run/mbn-slurmd-$n.pid; done
stop_pidfile /run/mbn-slurmctld.pid
for ns in "${names[@]}"; do
  # Whatever still runs in a namespace (a step's leftovers) goes with it.
  for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  ip link del "mbn-v${ns#mbn-}" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "/etc/netns/$ns"
done
ip link del mbn-br0 2>/dev/null
rm -rf /var/lib/mbench-netns /etc/slurm-mbn /var/log/mbench-netns /dev/mbn-fakegpu0 /dev/mbn-fakegpu1
echo "== netns bed down"
