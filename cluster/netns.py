"""Machines played by network namespaces (the tests of partitions and quiet machines, and
`bench datacenters`): N namespaces on a bridge, each with an address of
its own (10.X.Y.10+i; the bridge, on the root side, 10.X.Y.1), removed afterwards with
every process still in them. Needs root, `ip netns` and iptables (scripts/install.sh)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from runtime import children


def sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True, timeout=30)


def can_make() -> str | None:
    """None if namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        return "no `ip` command (iproute2)"
    return None if p.returncode == 0 else f"`ip netns` fails here: {p.stderr.strip()}"


@dataclass(frozen=True)
class Namespace:
    name: str
    ip: str

    def run(self, *cmd: str) -> list[str]:
        """`cmd` as run inside this namespace."""
        return ["ip", "netns", "exec", self.name, *cmd]

    def pids(self) -> list[int]:
        """Every process in the namespace (ours: the namespace is this test's)."""
        p = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True, timeout=10)
        return [int(x) for x in p.stdout.split()]

    def kill_all(self) -> int:
        """SIGKILL every process in the namespace at once, as a machine that loses power."""
        return self.signal_all(signal.SIGKILL)

    def pause_all(self, on: bool) -> None:
        """Every process in the namespace stopped (SIGSTOP) or continued at once: a machine
        gone quiet without dying (a hung kernel, a stalled VM), its sockets open. A pause
        returns once every one of them is stopped: until then they still answer (a
        quiet-machines round counted a put answered 10 ms after its pause began)."""
        pids = self._signal(signal.SIGSTOP if on else signal.SIGCONT)
        if on:
            for pid in pids:
                children.wait_stopped(pid)

    def signal_all(self, sig: int) -> int:
        """`sig` to every process in the namespace (ours: the namespace is this test's)."""
        return len(self._signal(sig))

    def _signal(self, sig: int) -> list[int]:
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def link(self, up: bool) -> None:
        """The machine's network interface up or down (a partition of the whole machine)."""
        sh("ip", "netns", "exec", self.name, "ip", "link", "set", "eth0", "up" if up else "down")


def _free_net(subnet: str, start: int) -> int:
    """A net of `subnet` (20-219) no address on this machine is in, from the `start`-th on:
    a bridge left by a run that was killed keeps its address and its route, and a run that
    took the same net (its pid's) reached none of its namespaces (10.204.21.0/24 routed to
    the dead bridge)."""
    used = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                          timeout=30).stdout
    for i in range(200):
        net = (start + i) % 200 + 20
        if f" {subnet.format(net, '')}" not in used:
            return net
    raise RuntimeError(f"every net of {subnet} is in use on this machine")


@contextmanager
def namespaces(n: int, subnet: str, kind: str) -> Iterator[tuple[list[Namespace], str]]:
    """`n` namespaces on a bridge, and the bridge's (root side) address. `subnet`: a format
    with two places (the net, the host), as "10.201.{}.{}"; `kind`: a letter of the
    caller's own in every name (two users in one process must not meet a link the other
    left being torn down)."""
    num = os.getpid() % 10000
    tag = f"{kind}{num}"
    net = _free_net(subnet, num % 200)
    bridge = f"mtbr{tag}"
    made: list[Namespace] = []
    try:
        sh("ip", "link", "add", bridge, "type", "bridge")
        sh("ip", "addr", "add", subnet.format(net, 1) + "/24", "dev", bridge)
        sh("ip", "link", "set", bridge, "up")
        for i in range(n):
            ns = Namespace(f"mt{tag}n{i}", subnet.format(net, 10 + i))
            sh("ip", "netns", "add", ns.name)
            made.append(ns)
            sh("ip", "link", "add", f"mt{tag}v{i}", "type", "veth", "peer", "name", "eth0", "netns", ns.name)
            sh("ip", "link", "set", f"mt{tag}v{i}", "master", bridge, "up")
            sh(*ns.run("ip", "addr", "add", ns.ip + "/24", "dev", "eth0"))
            sh(*ns.run("ip", "link", "set", "eth0", "up"))
            sh(*ns.run("ip", "link", "set", "lo", "up"))
        yield made, subnet.format(net, 1)
    finally:
        for ns in made:
            ns.kill_all()
            deadline = time.monotonic() + 15
            while ns.pids() and time.monotonic() < deadline:  # gone before their namespace
                time.sleep(0.05)
            subprocess.run(["ip", "netns", "del", ns.name], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30)
