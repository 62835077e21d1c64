"""The `midtown user` commands: users and their tokens, for datasets with an access list."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cli.arguments import common_options
from cli.connect import CliError, zk_client
from cli.output import emit


def cmd_user(a: argparse.Namespace) -> int:
    from catalog import users

    zk = zk_client(a)
    try:
        if a.cmd == "add":
            token = users.add(zk, a.name)
            emit({"user": a.name, "token": token}, a.json)
            if not a.json:
                print("keep the token: it is not stored and cannot be shown again", file=sys.stderr)
        elif a.cmd == "list":
            emit([{"user": n} for n in users.names(zk)], a.json, ["user"])
        else:
            users.remove(zk, a.name)
            emit({"removed": a.name}, a.json)
    except ValueError as e:
        raise CliError(str(e)) from None
    finally:
        zk.stop()
    return 0


def add_parser(sub: Any) -> None:
    """user add|list|remove: users and their tokens."""
    us = sub.add_parser("user", help="users and their tokens, for datasets with an access list")
    uss = us.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    for name, helptext in (("add", "create a user and print its token (shown once)"),
                           ("list", "list users"), ("remove", "remove a user (its token stops "
                                                              "working within 5 s)")):
        sp = uss.add_parser(name, help=helptext)
        if name != "list":
            sp.add_argument("name")
        common_options(sp)
        sp.set_defaults(fn=cmd_user)
