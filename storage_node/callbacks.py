"""Results back to coordinators, the storage node's answers port (`AnswerLink`). By gRPC
(`Callbacks`): one queue and thread per coordinator address, so one Deliver call carries
every result ready for it. Best effort: a coordinator that is gone loses its results, and
its clients retry (the dedup table answers them). In the host layout (`ProcessAnswers`), the
coordinator of this process takes its results undecoded, and the others go by gRPC."""

from __future__ import annotations

import logging
from collections import deque
from typing import Protocol

import grpc

from midtown_pb import kv_pb2 as pb
from midtown_pb import kv_pb2_grpc
from record import codec
from record.model import RecordResult
from runtime import inprocess, transport, world
from storage_node.limits import CALLBACK_BATCH_MAX, CALLBACK_QUEUE_MAX

log = logging.getLogger("midtown.storage.callbacks")


class AnswerTaker(Protocol):
    """A coordinator in this process (the host layout): it takes results undecoded."""

    def deliver(self, results: list[RecordResult]) -> None: ...


# A record's result with the answer secret its record carried (the coordinator takes no
# answer without it).
Answer = tuple[RecordResult, int]


class AnswerLink(Protocol):
    def near(self, addr: str) -> bool:
        """Whether the coordinator at `addr` is in this process (an answer costs no call:
        it is always sent)."""

    def send(self, addr: str, results: list[Answer]) -> None:
        """Hand `results` to the coordinator at `addr` (without waiting for it)."""


class Callbacks:
    """Every coordinator by gRPC."""

    def __init__(self) -> None:
        self._outlets: dict[str, _Outlet] = {}
        self._lock = world.lock()

    def near(self, addr: str) -> bool:
        return False

    def send(self, addr: str, results: list[Answer]) -> None:
        msgs = encoded(results)
        with self._lock:
            o = self._outlets.get(addr)
            if o is None:
                o = self._outlets[addr] = _Outlet(addr)
        o.put(msgs)


def encoded(results: list[Answer]) -> list[pb.RecordResult]:
    """Results as a Deliver call carries them, each with its secret."""
    msgs = []
    for result, secret in results:
        m = codec.result_to_pb(result)
        m.answer_secret = secret
        msgs.append(m)
    return msgs


class ProcessAnswers:
    """The coordinator of this process (bound to `local` once it is built), its results
    handed over directly; the others through `others`."""

    def __init__(self, local: inprocess.Local[AnswerTaker], others: AnswerLink) -> None:
        self.local, self.others = local, others

    def near(self, addr: str) -> bool:
        return self.local.at(addr) is not None

    def send(self, addr: str, results: list[Answer]) -> None:
        taker = self.local.at(addr)
        if taker is None:
            self.others.send(addr, results)
            return
        inprocess.used("answer")
        taker.deliver([r for r, _ in results])


class _Outlet:
    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.stub = kv_pb2_grpc.CallbackStub(transport.channel(addr))
        self._q: deque[pb.RecordResult] = deque(maxlen=CALLBACK_QUEUE_MAX)
        self._cv = world.condition()
        world.spawn(f"callback-{addr}", self._run)

    def put(self, results: list[pb.RecordResult]) -> None:
        with self._cv:
            self._q.extend(results)
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._q:
                    self._cv.wait()
                batch = [self._q.popleft() for _ in range(min(len(self._q), CALLBACK_BATCH_MAX))]
            try:
                self.stub.Deliver(pb.DeliverRequest(results=batch), timeout=2.0)
            except grpc.RpcError as e:
                log.debug("callback to %s failed: %s", self.addr, e.code())
            except Exception:  # never let the thread die: the coordinator's client retries
                log.exception("callback to %s failed", self.addr)
