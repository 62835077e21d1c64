"""The machine (and locality) each log server and storage node runs on, kept in ZooKeeper
for as long as the server is a member, alive or not: placement reads them to keep copies on
distinct machines (fleet/failure_domains.py, the rule; this module, its records).

  /midtown/machines/log_servers/<id>     {"machine": "m1", "locality": "zone=a,rack=r1"}
  /midtown/machines/storage_nodes/<id>   the same, for storage nodes
  /midtown/placement                     {"one_machine": true}: a local cluster on one
                                         machine, whose copies share it (`cluster up`)

A server records its machine when it first starts. Started again on another machine with
its data, it is refused: its copies were placed where it was (a process that moved its
disk to another machine must be decommissioned and added back, so its copies are placed
again). Its locality may change (racks relabelled): the record follows, and `cluster
rebalance` spreads the copies again."""

from __future__ import annotations

import argparse
import json
import socket
from collections.abc import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from fleet import failure_domains
from fleet.connect import connect
from fleet.failure_domains import Domain, Domains
from runtime import membership
from runtime.process import EXIT_CONFIG, StartRefused, exit_now

ROOT = "/midtown/machines"
LOG_SERVERS = "log_servers"
STORAGE_NODES = "storage_nodes"
ROLES = (LOG_SERVERS, STORAGE_NODES)
PLACEMENT = "/midtown/placement"


class MachineMismatch(StartRefused):
    """A server started on another machine than the one its copies were placed on."""


def path(role: str, member_id: int) -> str:
    assert role in ROLES
    return f"{ROOT}/{role}/{member_id}"


def this_machine() -> str:
    """The default machine name: the host's name."""
    return socket.gethostname() or "localhost"


def add_flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--machine", default=None,
                    help="the machine this process runs on: no two copies of a shard or a log segment "
                         "are placed on one machine (default: the host's name)")
    ap.add_argument("--locality", default="",
                    help="where the machine is, widest tier first: zone=a,rack=r1 (copies spread over "
                         "the localities there are)")


def domain_from_flags(a: argparse.Namespace) -> Domain:
    """The Domain the flags name; ValueError naming the flag that is wrong."""
    return Domain(failure_domains.check_machine(a.machine or this_machine()),
                  failure_domains.parse_locality(a.locality))


def record(zk: KazooClient, role: str, member_id: int, domain: Domain) -> Domain | None:
    """Record that `member_id` runs on `domain` (its locality updated); the domain recorded
    before, if any. MachineMismatch naming both machines if it was placed on another one."""
    p = path(role, member_id)
    data = json.dumps(domain.to_json()).encode()
    while True:
        try:
            raw, stat = zk.get(p)
        except NoNodeError:
            try:
                zk.create(p, data, makepath=True)
                return None
            except NodeExistsError:
                continue
        before = Domain.from_json(json.loads(raw))
        if before.machine != domain.machine:
            what = role.replace("_", " ")[:-1]
            raise MachineMismatch(
                f"{what} {member_id} was placed on machine {before.machine!r}; this process says it runs "
                f"on {domain.machine!r} (--machine). Start it on {before.machine!r}, or decommission "
                f"{what} {member_id} and add this machine's process under a new id")
        if before == domain:
            return before
        try:
            zk.set(p, data, version=stat.version)
            return before
        except (BadVersionError, NoNodeError):
            continue


def forget(zk: KazooClient, role: str, member_id: int) -> None:
    """Drop a member's record (it left the cluster for good)."""
    try:
        zk.delete(path(role, member_id))
    except NoNodeError:
        pass


def recorded(zk: KazooClient, role: str) -> dict[int, Domain]:
    """Every recorded member's domain (members with none are left out)."""
    out: dict[int, Domain] = {}
    try:
        ids = zk.get_children(f"{ROOT}/{role}")
    except NoNodeError:
        return out
    for c in ids:
        try:
            raw, _ = zk.get(f"{ROOT}/{role}/{c}")
            out[int(c)] = Domain.from_json(json.loads(raw))
        except (NoNodeError, ValueError, KeyError):
            continue
    return out


def domains(zk: KazooClient, role: str) -> Domains:
    """Each member's domain, as placement asks for it (unrecorded ones: a machine each)."""
    return failure_domains.lookup(recorded(zk, role))


def one_machine(zk: KazooClient) -> bool:
    """Whether the cluster says it runs on one machine (its copies then share it)."""
    try:
        raw, _ = zk.get(PLACEMENT)
        return bool(json.loads(raw).get("one_machine", False))
    except (NoNodeError, ValueError):
        return False


def set_one_machine(zk: KazooClient, on: bool) -> None:
    data = json.dumps({"one_machine": on}).encode()
    try:
        zk.create(PLACEMENT, data, makepath=True)
    except NodeExistsError:
        zk.set(PLACEMENT, data)


def claim(zk: KazooClient, roles: Iterable[tuple[str, int]], domain: Domain) -> None:
    """Record `domain` for each (role, id) a starting process plays."""
    for role, member_id in roles:
        record(zk, role, member_id, domain)


def claim_at_start(zk_hosts: str, roles: Iterable[tuple[str, int]], domain: Domain) -> None:
    """What a server does first: say which machine this process is (its registrations
    carry it) and record it for each (role, id) it plays; a process on another machine than
    its data's ends here with EXIT_CONFIG, saying what to do."""
    membership.machine = domain.machine
    zk = connect(zk_hosts)
    try:
        claim(zk, roles, domain)
    except MachineMismatch as e:
        exit_now(EXIT_CONFIG, str(e))
    finally:
        zk.stop()
        zk.close()


def flags_domain(ap: argparse.ArgumentParser, a: argparse.Namespace) -> Domain:
    """domain_from_flags, a wrong flag ending the process with the parser's usage error."""
    try:
        return domain_from_flags(a)
    except ValueError as e:
        ap.error(f"--{e}")
