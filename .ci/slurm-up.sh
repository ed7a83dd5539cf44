#!/usr/bin/env bash
# Brings up a real single-node Slurm on this machine for the Slurm tests of
# mbench: installs Debian's slurm-wlm and munge when missing, writes a minimal
# slurm.conf (one node, this host, 16 CPUs and 8 GPUs as generic resources),
# starts munged, slurmctld and slurmd when they are not running, and waits
# until sinfo shows the node idle. Idempotent: a second call with everything
# up returns at once. Needs root.
#
# The GPUs are fake: /dev/mbench-fakegpu0..7 are character devices with
# /dev/null's numbers, declared in gres.conf with File=, so that Slurm binds
# them to job steps and sets CUDA_VISIBLE_DEVICES exactly as it does for real
# /dev/nvidiaN files. Nothing reads or writes them.
#
# There is no slurmdbd (accounting_storage/none): the tests verify teardown
# with squeue -s (steps) and squeue -j (jobs), which need no database.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

node=$(hostname -s)
conf=/etc/slurm/slurm.conf
export SLURM_CONF=$conf # this cluster's, whatever the caller's environment says
state=/var/lib/slurm-mbench
logs=/var/log/slurm-mbench

node_idle() {
  timeout 10 sinfo -h -n "$node" -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'
}

# This cluster's daemons are known by their pidfiles, never by name: the
# namespace test bed (.ci/netns-up.sh) runs a slurmctld and slurmds of its
# own on this machine.
pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
ctld_pid=/run/slurmctld-mbench.pid
slurmd_pid=/run/slurmd-mbench.pid

if command -v sinfo >/dev/null && [ -f "$conf" ] && grep -q 'mbench test cluster v2' "$conf" &&
  pid_alive $ctld_pid && pid_alive $slurmd_pid && node_idle; then
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  echo "== apt-get install slurm-wlm munge"
  apt-get update -qq
  apt-get install -y -qq slurm-wlm munge >/dev/null
fi

mkdir -p "$state/ctld" "$state/d" "$logs" /run/munge /var/log/munge /var/lib/munge /etc/munge
chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge 2>/dev/null || true
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
fi

for i in 0 1 2 3 4 5 6 7; do
  [ -c /dev/mbench-fakegpu$i ] || mknod -m 666 /dev/mbench-fakegpu$i c 1 3
done

# 16 CPUs and 8 GPUs whatever the machine has (config_overrides): the test
# packages run at once, each holding an allocation of a few CPUs and 2 GPUs,
# and on a 2-core machine the real CPU count would make them queue behind
# one another until their salloc deadlines.
cpus=$(( $(nproc) > 16 ? $(nproc) : 16 ))
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))
cat >"$conf.tmp" <<EOF
# mbench test cluster v2: written by .ci/slurm-up.sh, one node, fake GPUs.
SlurmdParameters=config_overrides
ClusterName=mbench
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/d
SlurmctldPidFile=$ctld_pid
SlurmdPidFile=$slurmd_pid
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=30
KillWait=5
Waittime=0
SchedulerType=sched/backfill
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:8 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
mv "$conf.tmp" "$conf"
cat >/etc/slurm/gres.conf <<EOF
AutoDetect=off
NodeName=$node Name=gpu File=/dev/mbench-fakegpu[0-7]
EOF
# slurmd loads a cgroup plugin even with proctrack/linuxproc and task/none
# (22.05 has no CgroupPlugin=disabled); autodetect picks v1 or v2 from what
# /sys/fs/cgroup is, and nothing is constrained.
cat >/etc/slurm/cgroup.conf <<EOF
CgroupPlugin=autodetect
ConstrainDevices=no
EOF

pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
# A configuration written anew (an older one, or none) needs fresh daemons:
# node CPUs and gres are read when slurmd starts.
for pf in $slurmd_pid $ctld_pid; do
  if pid_alive $pf; then
    p=$(cat $pf)
    kill "$p" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
  fi
done
slurmctld
slurmd

for _ in $(seq 1 60); do
  if node_idle; then
    echo "== slurm up: $(sinfo -h -o '%P %D %t %G')"
    exit 0
  fi
  state_now=$(timeout 10 sinfo -h -n "$node" -o '%t' 2>/dev/null || true)
  case "$state_now" in
  down* | drain* | unk*) scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 1
done
echo "slurm did not come up; last logs:" >&2
tail -20 "$logs/slurmctld.log" "$logs/slurmd.log" >&2 || true
exit 1
