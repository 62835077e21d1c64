"""bench/wan.py between two machines played by network namespaces: while it runs on both
sides, no TCP round trip between them takes less than the two delays; stopped (SIGTERM),
it takes its rules away, and packets flow between the two again."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from cluster.netns import can_make, namespaces

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(can_make() is not None, reason=str(can_make()))]

ECHO = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', 7000)); s.listen()
while True:
    c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while (d := c.recv(100)):
        c.sendall(d)
"""

ROUND_TRIPS = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 7000), timeout=30)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
ts = []
for _ in range(10):
    t = time.monotonic(); c.sendall(b'x'); c.recv(10); ts.append(time.monotonic() - t)
print(min(ts) * 1000, sorted(ts)[len(ts) // 2] * 1000)
"""


def test_packets_between_namespaces_are_held_the_delay_each_way() -> None:
    with namespaces(2, "10.206.{}.{}", "q") as (ns, _):
        a, b = ns
        echo = subprocess.Popen(b.run(sys.executable, "-c", ECHO))

        def round_trip_ms() -> tuple[float, float]:
            for _ in range(50):  # the echo server may not listen yet
                p = subprocess.run(a.run(sys.executable, "-c", ROUND_TRIPS, b.ip), capture_output=True,
                                   text=True, timeout=60)
                if p.returncode == 0:
                    least, p50 = map(float, p.stdout.split())
                    return least, p50
                time.sleep(0.1)
            raise AssertionError(f"no round trip: {p.stderr[-500:]}")

        round_trip_ms()
        wans = [subprocess.Popen(x.run(sys.executable, "-m", "bench.wan", "--queue", "5", "--delay-ms", "20",
                                       "--jitter-ms", "2", "--to", y.ip), stdout=subprocess.PIPE, text=True)
                for x, y in ((a, b), (b, a))]
        try:
            for w in wans:
                assert w.stdout is not None and w.stdout.readline().startswith("bench.wan: holding packets")
            held = round_trip_ms()
            assert held[0] >= 40, f"a round trip of {held[0]:.1f} ms with 20 ms held each way"
        finally:
            for w in wans:
                w.send_signal(signal.SIGTERM)
            codes = [w.wait(30) for w in wans]
            echo.kill()
        assert codes == [0, 0]
        rules = subprocess.run(a.run("iptables", "-S", "OUTPUT"), capture_output=True, text=True, timeout=30)
        assert "NFQUEUE" not in rules.stdout
        # Packets flow again: a rule left behind with nobody reading its queue would drop them.
        echo = subprocess.Popen(b.run(sys.executable, "-c", ECHO))
        try:
            round_trip_ms()
        finally:
            echo.kill()
