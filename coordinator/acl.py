"""Access control: who may read or write a dataset.

A dataset may carry an ACL: user names with "r" (get, scan) or "rw" (every operation).
A dataset without one is open to every client. Users are names with a secret token
(`midtown user add NAME` prints it once; ZooKeeper keeps only its SHA-256). A client
sends its token in the gRPC metadata (`authorization: Bearer TOKEN`; `Client(token=...)`,
`midtown ... --token` or `MIDTOWN_TOKEN`); for a dataset with an ACL, a missing or unknown
token is UNAUTHENTICATED and a user the ACL does not allow is PERMISSION_DENIED.

Pure: the coordinator looks tokens up (catalog/users.py) and asks `decide`."""

from __future__ import annotations

import grpc

from runtime.refusals import Refusal


def bearer(metadata: object) -> str | None:
    """The token of `authorization: Bearer TOKEN` in a call's metadata, if any."""
    for k, v in metadata or ():  # type: ignore[attr-defined]
        if k == "authorization" and isinstance(v, str) and v.startswith("Bearer "):
            return v[len("Bearer "):].strip() or None
    return None


def decide(acl: dict[str, str], dataset: str, user: str | None, token_given: bool,
           write: bool) -> Refusal | None:
    """None if the call may go on, else the refusal."""
    if not acl:
        return None
    if user is None:
        if not token_given:
            return Refusal(grpc.StatusCode.UNAUTHENTICATED,
                           f"dataset {dataset!r} has an access list; send a user's token "
                           "(Client(token=...), --token or MIDTOWN_TOKEN)", field="authorization")
        return Refusal(grpc.StatusCode.UNAUTHENTICATED, "unknown token", field="authorization")
    perm = acl.get(user)
    if perm is None or (write and perm != "rw"):
        verb = "write to" if write else "read"
        return Refusal(grpc.StatusCode.PERMISSION_DENIED, f"user {user!r} may not {verb} dataset {dataset!r}",
                       field="header.dataset")
    return None
