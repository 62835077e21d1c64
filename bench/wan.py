"""Links between data centers, emulated between machines played by network namespaces
(this kernel has no netem: `tc qdisc ... netem` is refused). Inside a namespace, an iptables
rule sends the packets it sends to the other data centers' addresses to an NFQUEUE; this
program, run inside the same namespace, holds each one for the delay (plus a jitter) and
then lets it go:

    ip netns exec NS python -m bench.wan --queue 7 --delay-ms 20 --jitter-ms 2 --to 10.1.2.0/26

adds the rule for each --to net, and removes it on the way out (SIGINT, SIGTERM, SIGHUP).
Run in every namespace, a message between two data centers waits the delay each way, so a
round trip takes twice the delay more than on the bridge.

How faithful: every packet is held in order (a packet never leaves before one sent
earlier: the jitter never reorders, as on a single path), none is lost, and the bandwidth
is the bridge's; each packet costs this program some CPU to queue and release, on the
machine's shared cores. A packet sent while the program is not running is not delayed (the
rule is in place only while it runs). Measured here once, by hand, with a one-byte TCP echo
between two namespaces (20 round trips): 0.02 ms on the bridge, 42.1 ms p50 (the least
40.8 ms) with 20 ms each way and 2 ms of jitter on one side; tests/integration/test_wan.py
checks the floor (no round trip under the two delays), not those figures."""

from __future__ import annotations

import argparse
import collections
import ipaddress
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Hold:
    """When each packet goes: `delay_s` after it came, plus up to `jitter_s`, never before
    the one that came before it (pure: tests/test_wan.py)."""
    delay_s: float
    jitter_s: float = 0.0
    draw: Callable[[], float] = field(default_factory=lambda: random.Random(7).random)
    last_s: float = 0.0

    def due(self, came_s: float) -> float:
        self.last_s = max(came_s + self.delay_s + self.jitter_s * self.draw(), self.last_s)
        return self.last_s


def rule(action: str, queue: int, net: str) -> list[str]:
    """The iptables command that adds (-I) or deletes (-D) the rule sending packets to `net`
    to queue `queue`."""
    return ["iptables", action, "OUTPUT", "-d", net, "-j", "NFQUEUE", "--queue-num", str(queue)]


def _net(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--to: {text!r} is not an address or a net (10.1.2.0/26)") from None


def _positive_ms(name: str, allow_zero: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not a number of ms") from None
        if not (0 <= v <= 10_000) or (v == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"{name}: {text} ms, from {'0' if allow_zero else '>0'} "
                                             "to 10000")
        return v / 1000
    return parse


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.wan", description=__doc__.split("\n\n")[0])
    ap.add_argument("--queue", type=int, required=True, help="the NFQUEUE number (0-65535)")
    ap.add_argument("--delay-ms", dest="delay_s", metavar="MS", type=_positive_ms("--delay-ms", False),
                    required=True)
    ap.add_argument("--jitter-ms", dest="jitter_s", metavar="MS", type=_positive_ms("--jitter-ms", True),
                    default=0.0)
    ap.add_argument("--to", type=_net, action="append", required=True, metavar="NET",
                    help="a net whose packets to hold (again for more)")
    a = ap.parse_args(argv)
    if not 0 <= a.queue <= 65535:
        ap.error(f"--queue: {a.queue}, from 0 to 65535")
    try:
        from netfilterqueue import NetfilterQueue
    except ImportError:
        print("bench.wan: needs netfilterqueue (pip install netfilterqueue; Debian: "
              "libnetfilter-queue-dev; make install does both)", file=sys.stderr)
        return 2

    hold = Hold(a.delay_s, a.jitter_s, random.Random().random)
    held: collections.deque[tuple[float, Any]] = collections.deque()
    cond = threading.Condition()
    stop = threading.Event()

    def came(pkt: Any) -> None:
        with cond:
            held.append((hold.due(time.monotonic()), pkt))
            cond.notify()

    def release() -> None:
        while not stop.is_set():
            with cond:
                while not held and not stop.is_set():
                    cond.wait(0.5)
                if not held:
                    continue
                due, pkt = held[0]
                wait = due - time.monotonic()
                if wait > 0:
                    cond.wait(wait)
                    continue
                held.popleft()
            pkt.accept()

    def stopped(signum: int, _frame: Any) -> None:
        stop.set()
        raise KeyboardInterrupt

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, stopped)
    nfq = NetfilterQueue()
    nfq.bind(a.queue, came, max_len=100_000)
    added: list[str] = []
    releaser = threading.Thread(target=release, name="release", daemon=True)
    try:
        for net in a.to:
            subprocess.run(rule("-I", a.queue, net), check=True, capture_output=True, timeout=30)
            added.append(net)
        releaser.start()
        print(f"bench.wan: holding packets to {', '.join(a.to)} for {a.delay_s * 1000:g} ms "
              f"(+ up to {a.jitter_s * 1000:g} ms), queue {a.queue}", flush=True)
        nfq.run()
    except KeyboardInterrupt:
        pass
    except subprocess.CalledProcessError as e:
        print(f"bench.wan: {' '.join(e.cmd)}: {(e.stderr or b'').decode().strip()}", file=sys.stderr)
        return 1
    finally:
        stop.set()
        for net in added:  # the rule first: packets sent from now on go straight out
            subprocess.run(rule("-D", a.queue, net), capture_output=True, timeout=30)
        with cond:
            rest = [pkt for _, pkt in held]
            held.clear()
        for pkt in rest:
            pkt.accept()
        nfq.unbind()
    return 0


if __name__ == "__main__":
    sys.exit(main())
