"""What a server tells a client beyond the status code, in trailing metadata: the
vocabulary the servers and the SDK share (never matched on message text)."""

# Sent with a quota refusal (coordinator/quotas.py): the SDK does not retry it (a retry
# cannot succeed).
QUOTA_TRAILER = ("midtown-refused", "quota")
