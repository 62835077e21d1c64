"""A caller without a certificate of the cluster's CA: every method of every internal
service (Log, Replica, Storage, Callback), on each address given, once over plaintext and
once over TLS with no client certificate. Prints {address: {method: {how: status}}} as
JSON. Run inside a network namespace (another machine) by tests/integration/test_netns.py:

    python -m tests.integration.stranger CA.pem HOST:PORT ..."""

from __future__ import annotations

import json
import sys

import grpc

from midtown_pb import kv_pb2, log_pb2

INTERNAL = ((log_pb2, "Log"), (log_pb2, "Replica"), (kv_pb2, "Storage"), (kv_pb2, "Callback"))


def calls(ch: grpc.Channel) -> dict[str, str]:
    out = {}
    for module, name in INTERNAL:
        service = module.DESCRIPTOR.services_by_name[name]
        for m in service.methods:
            path = f"/{service.full_name}/{m.name}"
            kind = (("stream_" if m.client_streaming else "unary_")
                    + ("stream" if m.server_streaming else "unary"))
            call = getattr(ch, kind)(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)
            try:
                if m.client_streaming:
                    got = call(iter([b""]), timeout=5)
                else:
                    got = call(b"", timeout=5)
                if m.server_streaming:
                    for _ in got:
                        pass
                out[path] = "OK"
            except grpc.RpcError as e:
                out[path] = e.code().name  # type: ignore[attr-defined]
    return out


def main() -> None:
    ca = open(sys.argv[1], "rb").read()
    result = {}
    for addr in sys.argv[2:]:
        chans = {"plaintext": grpc.insecure_channel(addr),
                 "TLS without a certificate": grpc.secure_channel(addr, grpc.ssl_channel_credentials(ca))}
        per: dict[str, dict[str, str]] = {}
        for how, ch in chans.items():
            for path, code in calls(ch).items():
                per.setdefault(path, {})[how] = code
            ch.close()
        result[addr] = per
    print(json.dumps(result))


if __name__ == "__main__":
    main()
