"""The `midtown` command: its parser, made of the command groups' parsers (each group's
parser and handlers in a module of its own: cluster.py, logs.py, datasets.py, users.py,
data.py, nodes.py, placement.py, shards.py, log_servers.py, backup.py, watch.py, scopes.py,
trace.py), and how each outcome ends the process (`run`, which the benchmarks' program,
bench/main.py, uses too).

Every command finds its cluster through --dir DIR (a local cluster), --zk HOST:PORT, or the
MIDTOWN_ZK environment variable; with none of them, ./run/local (the `make run` cluster)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from cli import cluster as cluster_cli
from cli import data as data_cli
from cli import datasets as datasets_cli
from cli import logs as logs_cli
from cli import nodes as nodes_cli
from cli import users as users_cli
from cli.arguments import common_options
from cli.connect import CliError, Unreachable, zk_client
from cli.interrupts import Interrupted, exit_code, interrupt_on_stop_signals, stop_signal
from runtime import children
from runtime.forking import restart_without_grpc_fork_handlers


def parser() -> argparse.ArgumentParser:
    """The `midtown` command's parser: one function per group of commands below."""
    p = argparse.ArgumentParser(
        prog="midtown", description="Midtown key-value store",
        epilog="The options of every command that talks to a cluster (--zk, --dir, --timeout, --json, "
               "--token, --coordinator, --tls-ca, --encoding) may also come before the command. Exit "
               "codes: 0 done, 1 refused by the store, 2 bad command line, 3 get found nothing, 4 cas "
               "did not succeed, 5 cluster unreachable or no answer in time, 128+N signal N.")
    p.add_argument("--version", action="version", version=f"midtown {version()}")
    p.add_argument("--verbose", action="store_true",
                   help="log what the command's clients do to stderr, ZooKeeper's client (kazoo) included "
                        "(before the command: midtown --verbose get ...)")
    sub = p.add_subparsers(dest="group", metavar="COMMAND", required=True)
    cluster = cluster_cli.add_parser(sub)
    for group in (logs_cli, datasets_cli, users_cli, data_cli):
        group.add_parser(sub)
    node = nodes_cli.add_parser(sub)
    from cli import placement as placement_cli
    from cli import shards as shards_cli

    placement_cli.add_parser(sub, common_options)
    shards_cli.add_parser(sub, common_options, zk_client)
    # cluster rebalance, node decommission
    shards_cli.add_balance_parsers(cluster, node, common_options, zk_client)
    from cli import machines as machines_cli

    machines_cli.add_parser(cluster, common_options, zk_client, sub)  # cluster check, machine up
    from cli import log_servers as log_servers_cli

    log_servers_cli.add_parser(sub, common_options, zk_client)
    from cli import backup as backup_cli

    backup_cli.add_parser(sub, common_options, zk_client)
    from cli import watch as watch_cli

    watch_cli.add_parser(sub, common_options)
    from cli import scopes as scopes_cli

    scopes_cli.add_parser(sub, common_options)
    from cli import trace as trace_cli

    trace_cli.add_parser(sub)
    return p


def use_internal_credentials(env: Mapping[str, str]) -> None:
    """The certificate the command's calls on internal services carry in a cluster with
    mutual TLS (`machine up --tls-dir`): $MIDTOWN_TLS_CERT and $MIDTOWN_TLS_KEY, signed by
    the CA in $MIDTOWN_TLS_CA (a local cluster's, with --dir, is found by itself)."""
    cert, key = env.get("MIDTOWN_TLS_CERT"), env.get("MIDTOWN_TLS_KEY")
    if not cert and not key:
        return
    if not (cert and key):
        raise CliError("MIDTOWN_TLS_CERT and MIDTOWN_TLS_KEY go together")
    from runtime import transport

    try:
        transport.use(transport.Credentials.load(env.get("MIDTOWN_TLS_CA"), cert, key))
    except ValueError as e:
        raise CliError(f"$MIDTOWN_TLS_CA/CERT/KEY: {e}") from None


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("midtown")
    except PackageNotFoundError:
        return "unknown (not installed)"


# Exit codes, one per kind of outcome (docs/api.md, "The command line"): 3 and 4 are a
# get that found nothing and a check-and-set that did not succeed; 128 + N, signal N.
EXIT_REFUSED = 1  # the store refused the request (its gRPC status is printed)


EXIT_USAGE = 2  # a bad command line or argument


EXIT_UNREACHABLE = 5  # the cluster could not be reached, or did not answer in time


# Options that every command talking to a cluster takes, accepted before the command too
# (`midtown --zk HOST:PORT get ...`, as `etcdctl --endpoints ... get`): option -> takes a value.
COMMON_OPTIONS = {"--zk": True, "--dir": True, "--timeout": True, "--json": False, "--token": True,
                  "--coordinator": True, "--tls-ca": True, "--encoding": True}


def hoist_common(args: list[str]) -> list[str]:
    """`args` with the common options given before the command moved after it (before a
    `--`, if any), where the command's own parser takes them."""
    front: list[str] = []
    i = 0
    while i < len(args) and args[i].startswith("--") and args[i] != "--":
        name = args[i].split("=", 1)[0]
        if name not in COMMON_OPTIONS:
            break  # --version, --help, or a mistake the parser will name
        takes_value = COMMON_OPTIONS[name] and "=" not in args[i]
        front += args[i:i + 1 + takes_value]
        i += 1 + takes_value
    rest = args[i:]
    cut = rest.index("--") if "--" in rest else len(rest)
    return rest[:cut] + front + rest[cut:]


def end_process(code: int) -> None:
    """End the process without the interpreter's finalization. An interrupted command has
    stopped what it started (its `finally` blocks ran), but threads of its own may still be
    in gRPC calls (a benchmark's appenders); finalizing the interpreter under them crashed
    gRPC's core now and then (`bench log` ended by SIGSEGV, not 143, on SIGTERM)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    return run(parser(), "cli", argv)


def run(p: argparse.ArgumentParser, module: str, argv: list[str] | None) -> int:
    """Parse `argv` (the process's arguments if None) with `p`, run the command it names and
    turn its outcome into an exit code and at most one line on stderr. `module` is what
    `python -m` runs this program as (a command that starts Spark restarts through it)."""
    name = p.prog
    args = hoist_common(sys.argv[1:] if argv is None else argv)
    if not args:
        p.print_help()
        return 0
    a = p.parse_args(args)
    if getattr(a, "starts_spark", False):  # beside its gRPC clients (runtime/forking.py)
        restart_without_grpc_fork_handlers(module, args)
    import logging

    if a.verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(name)s %(levelname)s %(message)s")
    else:  # kazoo's connection chatter is no part of a command's output
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        logging.getLogger("midtown.zookeeper").setLevel(logging.CRITICAL)
    interrupt_on_stop_signals()  # what a command started, it stops on SIGTERM and SIGHUP too
    try:
        try:
            use_internal_credentials(os.environ)
            return int(a.fn(a))
        finally:
            # Whatever the command started and did not stop or hand over (a stop signal
            # that cut a start-up short) is stopped now (cli/children.py).
            children.stop_all()
    except KeyboardInterrupt as e:
        return _interrupted(e, argv)
    except Exception as e:
        sig = stop_signal()
        if sig is not None:  # it failed because the command was stopping (its cluster stopped
            # under a call): the command ends as the signal says, as if it had landed there
            return _interrupted(Interrupted(sig), argv)
        return _failed(name, e)


def _interrupted(e: KeyboardInterrupt, argv: list[str] | None) -> int:
    if argv is None:  # the command itself (not a caller in this process): end it now
        end_process(exit_code(e))
    return exit_code(e)


def _failed(name: str, e: Exception) -> int:
    """The exit code of a command that ended with `e`, and its one line on stderr."""
    from kazoo.exceptions import ConnectionLoss, SessionExpiredError

    from midtown.errors import MidtownError
    from runtime.refusals import Refusal

    if isinstance(e, Unreachable):
        print(f"{name}: {e}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if isinstance(e, CliError):
        print(f"{name}: {e}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(e, (Refusal, MidtownError)):
        print(f"{name}: {e.code.name}: {e.message}", file=sys.stderr)
        return EXIT_UNREACHABLE if e.code.name in ("UNAVAILABLE", "DEADLINE_EXCEEDED") else EXIT_REFUSED
    if isinstance(e, (ConnectionLoss, SessionExpiredError)):  # an expected fault, not a defect
        print(f"{name}: ZooKeeper's connection was lost during the command ({type(e).__name__}): "
              "what it was changing may or may not have changed; look, and run it again",
              file=sys.stderr)
        return EXIT_UNREACHABLE
    if isinstance(e, BrokenPipeError):
        return 0
    # never a traceback: one line, and where to look
    print(f"{name}: unexpected error: {type(e).__name__}: {e} (run with MIDTOWN_DEBUG=1 for "
          "the traceback)", file=sys.stderr)
    if os.environ.get("MIDTOWN_DEBUG"):
        raise e
    return 1
