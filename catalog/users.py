"""Users in ZooKeeper (/midtown/users/NAME -> the SHA-256 of their token) and a
coordinator's cache of them (coordinator/acl.py says how they are used)."""

from __future__ import annotations

import hashlib
import json
import re
import secrets

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from runtime import world

USER = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


def check_user(name: str, field: str = "USER") -> str:
    if not USER.match(name):
        raise ValueError(f"{field}: {name!r} must be 1-64 characters of a-z, 0-9, _ and -, "
                         "starting with a letter")
    return name


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()



ROOT = "/midtown/users"
TOKEN_PREFIX = "mt_"


def add(zk: KazooClient, name: str) -> str:
    """Create a user; returns its token (only its hash is kept)."""
    check_user(name)
    # A prefix: a token never starts with "-" (a command line would read it as an option)
    # and secret scanners can recognise it.
    token = TOKEN_PREFIX + secrets.token_urlsafe(24)
    zk.ensure_path(ROOT)
    try:
        zk.create(f"{ROOT}/{name}", json.dumps({"token_sha256": token_hash(token)}).encode())
    except NodeExistsError:
        raise ValueError(f"USER: user {name!r} already exists") from None
    return token


def remove(zk: KazooClient, name: str) -> None:
    try:
        zk.delete(f"{ROOT}/{name}")
    except NoNodeError:
        raise ValueError(f"USER: no user {name!r}") from None


def names(zk: KazooClient) -> list[str]:
    try:
        return sorted(zk.get_children(ROOT))
    except NoNodeError:
        return []


class UserCache:
    """Token -> user name, reloaded from ZooKeeper at most every `ttl_s`, and at once for a
    token not seen yet when the list of users changed since the last load (a ZooKeeper
    watch says so: a user just added works at once) or at most every `miss_s` otherwise
    (unknown tokens do not each cost a ZooKeeper read). A removed user, or a token that
    changed, is seen within `ttl_s`."""

    def __init__(self, zk: KazooClient, ttl_s: float = 5.0, miss_s: float = 1.0) -> None:
        self.zk = zk
        self.ttl_s, self.miss_s = ttl_s, miss_s
        self._by_hash: dict[str, str] = {}
        self._loaded = -1e9
        self._lock = world.lock()
        self._changed = True  # users added or removed since the last load

    def watch(self) -> None:
        """Look again at once when a user is added or removed (from now on)."""
        self.zk.ensure_path(ROOT)
        self.zk.ChildrenWatch(ROOT, self._on_children)

    def _on_children(self, children: list[str]) -> None:
        self._changed = True

    def user(self, token: str) -> str | None:
        h = token_hash(token)
        now = world.monotonic()
        age = now - self._loaded
        if age > self.ttl_s or (h not in self._by_hash and (self._changed or age > self.miss_s)):
            self._reload(now)
        return self._by_hash.get(h)

    def _reload(self, now: float) -> None:
        self._changed = False  # before reading: a change while it reads is read again
        found: dict[str, str] = {}
        for name in names(self.zk):
            try:
                data, _ = self.zk.get(f"{ROOT}/{name}")
            except NoNodeError:
                continue
            found[json.loads(data)["token_sha256"]] = name
        with self._lock:
            self._by_hash, self._loaded = found, now


PERMS = ("r", "rw")


def parse_acl(text: str, field: str = "--acl") -> dict[str, str]:
    """An access list as given: `alice=rw,bob=r` -> {"alice": "rw", "bob": "r"}."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        user, sep, perm = part.partition("=")
        if not sep or perm not in PERMS:
            raise ValueError(f"{field}: {part!r}; write USER=r or USER=rw, comma-separated")
        out[check_user(user, field)] = perm
    return out
