"""How a server refuses a request, the same way in the log servers, the storage nodes, the
coordinators and the access lists: a `Refusal` (a gRPC status code, the field at fault, a
message for people) and, where a client must act on the reason, a trailer (the
vocabulary the servers and the SDK share; never matched on message text)."""

from __future__ import annotations

from typing import Any, NoReturn

import grpc

# The trailer key, and why a call was refused:
REFUSED = "midtown-refused"
# A quota refusal (coordinator/quotas.py): the SDK does not retry it (a retry cannot succeed).
QUOTA_TRAILER = (REFUSED, "quota")
# A log server asked to append to a log it does not write (log/server.py): the writer's
# address comes in WRITER_TRAILER_KEY, or none when the log has no writer right now.
NOT_WRITER = "not-writer"
NO_WRITER = "no-writer"
WRITER_TRAILER_KEY = "midtown-writer"
# An append refused whole by a log's writer: it carries a record of a shard handed over to
# another log (log/seals.py). The sender reads the shard -> log map again and sends there.
SEALED = "sealed"
# A storage node that has not applied far enough for a read yet (storage_node/reads.py
# Behind): another replica may have; the coordinator asks it instead.
BEHIND_TRAILER = (REFUSED, "behind")


class Refusal(Exception):
    """A request refused. `field` names what was wrong ("" when nothing in the request
    was); the text a client sees is "field: message"."""

    def __init__(self, code: Any, message: str, trailers: tuple[tuple[str, str], ...] = (),
                 field: str = "", *, reason: str = "", redirect: str = "") -> None:
        self.code = code  # a grpc.StatusCode
        self.field = field
        self.message = message
        # `reason` (REFUSED) and `redirect` (WRITER_TRAILER_KEY) go in the trailers
        self.trailers = (tuple(trailers) + (((REFUSED, reason),) if reason else ())
                         + (((WRITER_TRAILER_KEY, redirect),) if redirect else ()))
        super().__init__(self.text)

    @classmethod
    def of_call(cls, e: grpc.RpcError) -> Refusal:
        """The status a gRPC call ended with (`e`), as the Refusal its caller handles: the
        one conversion back from a status, as abort() is the one to it."""
        return cls(e.code(), e.details() or "", tuple(e.trailing_metadata() or ()))

    @property
    def reason(self) -> str:
        """Why it was refused, where a client must act on it (REFUSED's values); "" if not said."""
        return reason(self.trailers)

    @property
    def redirect(self) -> str:
        """The server to ask instead (a log's writer: WRITER_TRAILER_KEY); "" if none."""
        return str(dict(self.trailers).get(WRITER_TRAILER_KEY, ""))

    @property
    def text(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def abort(self, ctx: Any) -> NoReturn:
        """End the call with this refusal (ctx: a grpc.ServicerContext)."""
        if self.trailers:
            ctx.set_trailing_metadata(self.trailers)
        ctx.abort(self.code, self.text)
        raise AssertionError("ctx.abort returned")  # it raises

    def within(self, prefix: str) -> Refusal:
        """The same refusal about a part of a larger request: its text after `prefix`
        ("requests[3]: ")."""
        return Refusal(self.code, prefix + self.text, self.trailers)


class BadRequest(Refusal, ValueError):
    """A request, or a value in it, that no retry can make right: INVALID_ARGUMENT unless
    `code` says otherwise, the message naming the field. Cores raise it for what a client
    sent; it is also a ValueError, so code that checks a value it built itself may catch it
    as one."""

    def __init__(self, message: str, field: str = "", code: Any = None) -> None:
        super().__init__(code or grpc.StatusCode.INVALID_ARGUMENT, message, (), field)


def reason(trailers: object) -> str:
    """The refusal reason in a call's trailing metadata ("" when there is none)."""
    return str(dict(trailers or ()).get(REFUSED, ""))  # type: ignore[call-overload]
