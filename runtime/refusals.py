"""What a server tells a client beyond the status code, in trailing metadata: the
vocabulary the servers and the SDK share (never matched on message text)."""

# The trailer key, and why a call was refused:
REFUSED = "midtown-refused"
# A quota refusal (coordinator/quotas.py): the SDK does not retry it (a retry cannot succeed).
QUOTA_TRAILER = (REFUSED, "quota")
# A log server asked to append to a log it does not write (log/server.py): the writer's
# address comes in WRITER_TRAILER_KEY, or none when the log has no writer right now.
NOT_WRITER = "not-writer"
NO_WRITER = "no-writer"
WRITER_TRAILER_KEY = "midtown-writer"


def reason(trailers: object) -> str:
    """The refusal reason in a call's trailing metadata ("" when there is none)."""
    return str(dict(trailers or ()).get(REFUSED, ""))  # type: ignore[call-overload]
