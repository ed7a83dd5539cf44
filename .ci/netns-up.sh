#!/usr/bin/env bash
# Brings up mbench's multi-host test bed on this one machine: network
# namespaces joined by a bridge, each namespace a host with its own network
# stack (its own 127.0.0.1), its own hostname for the daemons started in it,
# and its own sshd; three of them are the compute nodes of a Slurm cluster
# (one slurmd each) whose controller runs here, beside the one-node cluster of
# .ci/slurm-up.sh and without touching it (own config directory, ports, state,
# logs and node names; munge is shared).
#
#   bridge mbn-br0   10.231.0.1/24   this machine: the login node, slurmctld
#   mbn-n1..mbn-n3   10.231.0.11-13  Slurm nodes (2 fake GPUs, 8 CPUs each) + sshd
#   mbn-h1..mbn-h3   10.231.0.21-23  SSH hosts
#
# These are the only non-loopback addresses the tests send to. Everything the
# tests need to know is in /var/lib/mbench-netns/bed.json (Go:
# internal/netnstest). The daemons of a namespace (slurmd, sshd,
# and so every step and SSH session there) run with its network, a hostname
# of their own (a UTS namespace) and /etc/netns/NS/{hosts,slurm} mounted on
# /etc/hosts and /etc/slurm (a mount namespace), so on every namespace host
# plain `squeue` talks to the test bed's cluster; here, set
# SLURM_CONF=/etc/slurm-mbn/slurm.conf. (Not `ip netns exec`: it remounts
# /sys, which hides the cgroup mounts slurmd needs.)
#
# Idempotent: with everything up it returns at once; anything missing is
# (re)created. .ci/netns-down.sh takes it all down. Needs root.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

# The version names this script's content: any edit rebuilds what it writes
# (daemons restart only when their configuration changed).
version="mbench netns bed $(sha256sum "$0" | cut -c1-12)"
bed=/var/lib/mbench-netns
logs=/var/log/mbench-netns
conf_dir=/etc/slurm-mbn
conf=$conf_dir/slurm.conf
br=mbn-br0
login_addr=10.231.0.1
nodes=(mbn-n1 mbn-n2 mbn-n3)
hosts=(mbn-h1 mbn-h2 mbn-h3)
declare -A addr=([mbn-n1]=10.231.0.11 [mbn-n2]=10.231.0.12 [mbn-n3]=10.231.0.13
  [mbn-h1]=10.231.0.21 [mbn-h2]=10.231.0.22 [mbn-h3]=10.231.0.23)
ctld_port=6917
slurmd_port=6918

export SLURM_CONF=$conf

# in_ns NS CMD...: runs CMD as a daemon of namespace host NS (see above).
in_ns() {
  local ns=$1
  shift
  nsenter --net=/run/netns/$ns unshare --mount --uts --propagation private sh -c \
    'mount --bind "/etc/netns/$0/hosts" /etc/hosts && mount --bind "/etc/netns/$0/slurm" /etc/slurm && hostname "$0" && exec "$@"' \
    "$ns" "$@"
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

nodes_idle() {
  local out
  out=$(timeout 10 sinfo -h -N -p mbn -o '%N %t' 2>/dev/null) || return 1
  for n in "${nodes[@]}"; do
    grep -qE "^$n (idle|mix|alloc)" <<<"$out" || return 1
  done
}

ssh_up() {
  for ns in "${nodes[@]}" "${hosts[@]}"; do
    pid_alive /run/mbn-sshd-$ns.pid || return 1
  done
}

all_up() {
  [ -f $bed/bed.json ] && grep -q "$version" $bed/bed.json && [ -f "$conf" ] || return 1
  ip link show $br >/dev/null 2>&1 || return 1
  for ns in "${nodes[@]}" "${hosts[@]}"; do
    [ -e /run/netns/$ns ] || return 1
  done
  pid_alive /run/mbn-slurmctld.pid || return 1
  for n in "${nodes[@]}"; do pid_alive /run/mbn-slurmd-$n.pid || return 1; done
  ssh_up && nodes_idle
}

if command -v sinfo >/dev/null && all_up; then
  exit 0
fi

need=()
command -v ip >/dev/null || need+=(iproute2)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null || need+=(openssh-client)
command -v slurmctld >/dev/null || need+=(slurmctld slurm-client)
command -v slurmd >/dev/null || need+=(slurmd)
command -v munged >/dev/null || need+=(munge)
command -v unshare >/dev/null || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
  echo "== apt-get install ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

mkdir -p $bed/ssh $bed/ctld $bed/slurmd $logs $conf_dir /run/sshd /etc/netns /etc/slurm

# --- network: one bridge, a veth pair per namespace -------------------------
if ! ip link show $br >/dev/null 2>&1; then
  ip link add $br type bridge
fi
ip link set $br up
ip addr replace $login_addr/24 dev $br
for ns in "${nodes[@]}" "${hosts[@]}"; do
  [ -e /run/netns/$ns ] || ip netns add $ns
  v=v${ns#mbn-} # mbn-n1 -> vn1
  if ! ip link show mbn-$v >/dev/null 2>&1; then
    ip link add mbn-$v type veth peer name eth0 netns $ns
  fi
  ip link set mbn-$v master $br up
  ip -n $ns link set lo up
  ip -n $ns addr replace ${addr[$ns]}/24 dev eth0
  ip -n $ns link set eth0 up
done

# --- names: every namespace resolves every other ----------------------------
{
  echo "127.0.0.1 localhost"
  echo "$login_addr mbn-login"
  for ns in "${nodes[@]}" "${hosts[@]}"; do echo "${addr[$ns]} $ns"; done
} >$bed/hosts.tmp
for ns in "${nodes[@]}" "${hosts[@]}"; do
  mkdir -p /etc/netns/$ns/slurm
  { echo "127.0.1.1 $ns"; cat $bed/hosts.tmp; } >/etc/netns/$ns/hosts
done

# --- munge (shared with the one-node cluster) -------------------------------
mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge 2>/dev/null || true
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
fi
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged

# --- Slurm: controller here, one slurmd per node namespace ------------------
for i in 0 1; do
  [ -c /dev/mbn-fakegpu$i ] || mknod -m 666 /dev/mbn-fakegpu$i c 1 3
done
cat >$conf.tmp <<EOF
# mbench netns bed: written by .ci/netns-up.sh; three nodes in network namespaces.
SlurmdParameters=config_overrides
ClusterName=mbn
SlurmctldHost=localhost($login_addr)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$bed/ctld
SlurmdSpoolDir=$bed/slurmd/%n
SlurmctldPidFile=/run/mbn-slurmctld.pid
SlurmdPidFile=/run/mbn-slurmd-%n.pid
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd-%n.log
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
GresTypes=gpu
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=10
InactiveLimit=0
MinJobAge=60
KillWait=5
Waittime=0
SchedulerType=sched/backfill
NodeName=DEFAULT CPUs=8 RealMemory=4096 Gres=gpu:2 State=UNKNOWN
EOF
for n in "${nodes[@]}"; do
  echo "NodeName=$n NodeAddr=${addr[$n]}" >>$conf.tmp
done
echo "PartitionName=mbn Nodes=$(
  IFS=,
  echo "${nodes[*]}"
) Default=YES MaxTime=INFINITE State=UP" >>$conf.tmp
cat >$conf_dir/gres.conf <<EOF
AutoDetect=off
Name=gpu File=/dev/mbn-fakegpu[0-1]
EOF
cat >$conf_dir/cgroup.conf <<EOF
CgroupPlugin=autodetect
ConstrainDevices=no
EOF
changed=1
if [ -f "$conf" ] && cmp -s "$conf" "$conf.tmp"; then changed=0; fi
mv $conf.tmp $conf
for ns in "${nodes[@]}" "${hosts[@]}"; do
  cp $conf $conf_dir/gres.conf $conf_dir/cgroup.conf /etc/netns/$ns/slurm/
done

stop_pidfile() { # stops the daemon a pidfile names, and waits until it is gone
  local p
  pid_alive "$1" || return 0
  p=$(cat "$1")
  kill "$p" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$p" 2>/dev/null || true
}
if [ $changed = 1 ]; then # a new configuration needs fresh daemons
  for n in "${nodes[@]}"; do stop_pidfile /run/mbn-slurmd-$n.pid; done
  stop_pidfile /run/mbn-slurmctld.pid
fi
pid_alive /run/mbn-slurmctld.pid || slurmctld -f $conf
for n in "${nodes[@]}"; do
  mkdir -p $bed/slurmd/$n
  if ! pid_alive /run/mbn-slurmd-$n.pid; then
    # Its own hostname (a UTS namespace), so slurmd knows which node it is.
    SLURM_CONF=/etc/slurm/slurm.conf in_ns $n slurmd
  fi
done

# --- SSH: a key for the tests, one sshd per namespace -----------------------
[ -s $bed/ssh/host_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -C mbn-host -f $bed/ssh/host_ed25519
[ -s $bed/ssh/id_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -C mbn-client -f $bed/ssh/id_ed25519
cp $bed/ssh/id_ed25519.pub $bed/ssh/authorized_keys
chmod 600 $bed/ssh/authorized_keys $bed/ssh/id_ed25519
hostpub=$(cut -d' ' -f1,2 $bed/ssh/host_ed25519.pub)
: >$bed/ssh/known_hosts.tmp
: >$bed/ssh/ssh_config.tmp
for ns in "${nodes[@]}" "${hosts[@]}"; do
  echo "$ns,${addr[$ns]} $hostpub" >>$bed/ssh/known_hosts.tmp
  printf 'Host %s %s\n  HostName %s\n  Port 22\n  User root\n  IdentityFile %s\n' \
    "$ns" "${addr[$ns]}" "${addr[$ns]}" "$bed/ssh/id_ed25519" >>$bed/ssh/ssh_config.tmp
done
mv $bed/ssh/known_hosts.tmp $bed/ssh/known_hosts
mv $bed/ssh/ssh_config.tmp $bed/ssh/ssh_config
cat >$bed/ssh/sshd_config <<EOF
Port 22
HostKey $bed/ssh/host_ed25519
AuthorizedKeysFile $bed/ssh/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
AllowTcpForwarding yes
X11Forwarding no
PrintMotd no
MaxSessions 64
MaxStartups 64:30:128
LogLevel INFO
SetEnv SHLVL=1
EOF
for ns in "${nodes[@]}" "${hosts[@]}"; do
  pid_alive /run/mbn-sshd-$ns.pid ||
    in_ns $ns /usr/sbin/sshd -f $bed/ssh/sshd_config -E $logs/sshd-$ns.log \
      -o ListenAddress=${addr[$ns]} -o PidFile=/run/mbn-sshd-$ns.pid
done

# --- the description the tests read ----------------------------------------
{
  printf '{\n  "version": "%s",\n  "login_addr": "%s",\n  "slurm_conf": "%s",\n  "partition": "mbn",\n' \
    "$version" "$login_addr" "$conf"
  printf '  "ssh": {"user": "root", "port": 22, "client_key": "%s", "known_hosts": "%s", "ssh_config": "%s"},\n' \
    "$bed/ssh/id_ed25519" "$bed/ssh/known_hosts" "$bed/ssh/ssh_config"
  printf '  "slurmd_pidfile": "/run/mbn-slurmd-%%s.pid",\n'
  sep=""
  printf '  "nodes": ['
  for n in "${nodes[@]}"; do printf '%s\n    {"name": "%s", "addr": "%s", "gpus": 2, "cpus": 8}' "$sep" "$n" "${addr[$n]}"; sep=","; done
  printf '\n  ],\n  "hosts": ['
  sep=""
  for h in "${hosts[@]}"; do printf '%s\n    {"name": "%s", "addr": "%s"}' "$sep" "$h" "${addr[$h]}"; sep=","; done
  printf '\n  ]\n}\n'
} >$bed/bed.json.tmp
mv $bed/bed.json.tmp $bed/bed.json

for _ in $(seq 1 60); do
  if nodes_idle && ssh_up; then
    echo "== netns bed up: $(sinfo -h -p mbn -o '%P %D %t %G'); ssh on ${nodes[*]} ${hosts[*]}"
    exit 0
  fi
  for n in "${nodes[@]}"; do
    case "$(timeout 10 sinfo -h -n $n -o '%t' 2>/dev/null || true)" in
    down* | drain* | unk*) scontrol update NodeName=$n State=RESUME >/dev/null 2>&1 || true ;;
    esac
  done
  sleep 1
done
echo "netns bed did not come up; last logs:" >&2
tail -20 $logs/slurmctld.log $logs/slurmd-*.log $logs/sshd-*.log >&2 || true
exit 1
