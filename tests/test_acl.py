"""Access lists (coordinator/acl.py): parsing, tokens in metadata, and every decision."""

from __future__ import annotations

import grpc
import pytest

from catalog import users
from coordinator import acl


def test_parse_and_refuse_bad_lists() -> None:
    assert users.parse_acl("alice=rw, bob=r,") == {"alice": "rw", "bob": "r"}
    for bad, needle in [("alice", "USER=r"), ("alice=x", "USER=r"), ("Alice=r", "'Alice'"),
                        ("=r", "''")]:
        with pytest.raises(ValueError, match=needle):
            users.parse_acl(bad)


def test_bearer_tokens_from_metadata() -> None:
    assert acl.bearer((("x", "y"), ("authorization", "Bearer abc"))) == "abc"
    assert acl.bearer((("authorization", "Basic abc"),)) is None
    assert acl.bearer((("authorization", "Bearer "),)) is None
    assert acl.bearer(None) is None
    assert users.token_hash("t") == users.token_hash("t") != users.token_hash("u")


@pytest.mark.parametrize("access,user,token,write,want", [
    ({}, None, False, True, None),                               # open dataset
    ({"a": "rw"}, None, False, False, grpc.StatusCode.UNAUTHENTICATED),
    ({"a": "rw"}, None, True, False, grpc.StatusCode.UNAUTHENTICATED),  # unknown token
    ({"a": "rw"}, "a", True, True, None),
    ({"a": "r"}, "a", True, False, None),
    ({"a": "r"}, "a", True, True, grpc.StatusCode.PERMISSION_DENIED),
    ({"a": "rw"}, "b", True, False, grpc.StatusCode.PERMISSION_DENIED),
])
def test_decisions(access: dict, user: str | None, token: bool, write: bool,
                   want: grpc.StatusCode | None) -> None:
    got = acl.decide(access, "ds", user, token, write)
    assert (got.code if got else None) == want
    if got:
        assert got.field in ("authorization", "header.dataset") and got.text.startswith(got.field + ": ")
