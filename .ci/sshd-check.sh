#!/bin/sh
# sshd-check.sh: make sure OpenSSH's sshd is available, then run the SSH
# integration tests of orchestrator/hosts against it (sshdtest starts its own
# sshd on 127.0.0.1 with a temporary config; nothing system-wide is started).
# With MBENCH_REQUIRE_SSHD=1 a missing sshd fails the tests instead of
# skipping them.
set -eu
cd "$(dirname "$0")/.."
if [ ! -x /usr/sbin/sshd ] && ! command -v sshd >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		apt-get install -y --no-install-recommends openssh-server >/dev/null
	else
		echo "sshd-check: sshd is not installed (apt-get install openssh-server)" >&2
		exit 1
	fi
fi
# sshd's privilege separation directory.
[ "$(id -u)" = 0 ] && mkdir -p /run/sshd
export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
MBENCH_REQUIRE_SSHD=1 go test -count=1 "$@" ./orchestrator/hosts/...
