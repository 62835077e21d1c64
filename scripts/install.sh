#!/usr/bin/env bash
# Installs what Midtown needs on a fresh Debian machine (run as root):
# Java and Debian's ZooKeeper when missing, then a venv with the project and its packages.
# Safe to run again; each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(default-jre-headless)
[ -f /usr/share/java/zookeeper.jar ] || need_apt+=(zookeeper)
# The network-partition test runs log servers in network namespaces cut off with iptables.
command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
# The power-loss test mounts a FUSE filesystem that drops unsynced writes (tests/faults).
command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
# etcd: the benchmarks' opponent, and the suite starts it (a stop signal during a
# benchmark's start-up of etcd stops what was started: tests/integration/test_bench_signals.py).
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server etcd-client)
# The emulated links between data centers (bench/wan.py) hold packets through an NFQUEUE:
# netfilterqueue is built from source against libnetfilter_queue (a compiler, Python's headers).
[ -f /usr/include/libnetfilter_queue/libnetfilter_queue.h ] || need_apt+=(libnetfilter-queue-dev)
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
"$PYTHON" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || need_apt+=(python3-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install: need root to apt-get install ${need_apt[*]}" >&2
        exit 1
    fi
    echo "install: apt-get install ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    echo "install: creating .venv"
    "$PYTHON" -m venv .venv
fi
stamp=".venv/.stamp-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
    echo "install: pip install -e .[server,dev,spark]"
    .venv/bin/pip install -q --upgrade pip >/dev/null
    .venv/bin/pip install -q -e '.[server,dev,spark]' --config-settings editable_mode=compat
    rm -f .venv/.stamp-*
    touch "$stamp"
fi
