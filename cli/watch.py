"""`midtown watch DATASET`: a strong dataset's changes as they are committed, one line each
(JSON lines with --json), until --count changes, --for a while, or Ctrl-C. On the way out
it prints the resume point to standard error: `--from` it to go on where it stopped."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from typing import Any

from cli.connect import CliError, kv_client
from cli.output import show_payload, stream_line
from midtown.watch import Change, parse_start

WIDTHS = {"shard": 5, "position": 10, "kind": 6, "partition_key": 16, "local_key": 16, "value": 24,
          "version": 10, "expires_at_ms": 13}


def add_parser(sub: Any, common: Callable[..., None]) -> None:
    w = sub.add_parser("watch", help="print a strong dataset's changes as they are committed")
    w.add_argument("dataset")
    w.add_argument("--from", dest="start", default="now",
                   help="where to start: now (default), or SHARD=POSITION,... as printed on exit")
    w.add_argument("--partition-key", help="only this partitioning key's changes")
    w.add_argument("--count", type=int, help="stop after this many changes")
    w.add_argument("--for", dest="for_s", type=float, help="stop after this many seconds")
    w.add_argument("--coordinator", help="coordinator HOST:PORT (default: discover)")
    w.add_argument("--token", help="a user's token (default: $MIDTOWN_TOKEN)")
    w.add_argument("--tls-ca", help="call over TLS, trusting this CA's PEM file")
    common(w)
    w.set_defaults(fn=run)


def row(c: Change) -> dict[str, Any]:
    return {"shard": c.shard, "position": c.position, "kind": c.kind,
            "partition_key": show_payload(c.partition_key), "local_key": show_payload(c.local_key),
            "value": show_payload(c.value) if c.value is not None else None, "version": c.version,
            "expires_at_ms": c.expires_at_ms or None, "log_time_ms": c.log_time_ms}


def resume_text(positions: dict[int, int]) -> str:
    return ",".join(f"{s}={p}" for s, p in sorted(positions.items()))


def run(a: argparse.Namespace) -> int:
    try:
        start = parse_start(a.start)
    except ValueError as e:
        raise CliError(f"--from: {e}") from None
    if a.count is not None and a.count < 1:
        raise CliError(f"--count: {a.count}, must be 1 or more")
    if a.for_s is not None and not a.for_s > 0:
        raise CliError(f"--for: {a.for_s}, must be a number of seconds above 0")
    seen = 0
    with kv_client(a) as c:
        w = c.watch(a.dataset, start, partition_key=a.partition_key, timeout=a.timeout)
        timer = threading.Timer(a.for_s, w.close) if a.for_s else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        said = False  # the summary goes out after changes or an interrupt, not after an error

        def summary() -> None:
            print(f"{seen} changes; go on with --from {resume_text(w.positions)}" if w.positions
                  else f"{seen} changes", file=sys.stderr, flush=True)
        try:
            for change in w:
                r = row(change)
                if a.json:
                    print(json.dumps(r, sort_keys=True), flush=True)
                else:
                    if not seen:
                        print(stream_line(None, WIDTHS), flush=True)
                    print(stream_line(r, WIDTHS), flush=True)
                seen += 1
                if a.count is not None and seen >= a.count:
                    break
            said = True
        except KeyboardInterrupt:
            said = True
            raise
        finally:
            if timer is not None:
                timer.cancel()
            w.close()
            if said:
                summary()
    return 0
