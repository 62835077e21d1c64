"""The storage nodes' answers to the records a coordinator appended: which requests wait
for which record, where each record was sent (answers are taken for those records only,
and only from member storage nodes), and the replicas' digests compared at each position
(a difference is a divergence: a metric and a log line naming the shard and position).
coordinator/node.py registers each record here before appending it and waits on the
future it gets back; the callback service delivers here."""

from __future__ import annotations

import hashlib
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from concurrent import futures
from concurrent.futures import Future
from typing import Any

import grpc
from prometheus_client import Counter

from coordinator import limits
from record import answer
from record.answer import Answer
from runtime import world
from runtime.refusals import Refusal

log = logging.getLogger("midtown.coordinator")
DIVERGENCES = Counter(
    "midtown_replica_divergence_total",
    "Answers whose shard digest differs from another replica's at the same log position",
    ["shard"],
)
REFUSED_ANSWERS = Counter(
    "midtown_callback_answers_refused_total",
    "Answers delivered to the callback service that match no record this coordinator sent "
    "(or come from no member storage node, or lack the record's answer secret): dropped")

def answer_expected(sent: tuple[int, int] | None, members: Any, m: Answer, secret: int | None) -> bool:
    """Whether an answer delivered to the callback service can come from a storage node
    applying a record this coordinator sent: `sent` is that record's (log, shard), None if
    it sent none with this request id; `members` the registered storage node ids; `secret`
    the record's answer secret for an answer that came over the network (None: from the
    storage node in this process). Anything else (a forged or misdirected Deliver, even one
    naming a real request id) must neither wake a waiter nor be compared. (Its log may be
    another than the one the record was sent to: a record sent again after its shard was
    handed to another log is answered there with its first outcome, from the old log.)"""
    return (sent is not None and sent[1] == m.shard and m.node_id in members
            and (secret is None or secret == answer.secret_of(m)))


class Answers:
    def __init__(self, members: Callable[[], Collection[int]]) -> None:
        """`members`: the registered storage node ids (as last seen)."""
        self.members = members
        self._key = os.urandom(16)  # this process's: answer secrets cannot be guessed
        self._lock = world.lock()
        self._waiters: dict[bytes, list[Future[Answer]]] = {}
        self._sent: OrderedDict[bytes, tuple[int, int]] = OrderedDict()
        self._digests: OrderedDict[tuple[int, int, int], tuple[int, int]] = OrderedDict()
        self.refused = 0  # answers dropped: for no record sent, or from no member
        self.divergences = 0

    def secret(self, request_id: bytes) -> int:
        """The answer secret of this coordinator's record with `request_id` (kv.proto
        Record.answer_secret): a hash of it keyed with this process's key."""
        return int.from_bytes(hashlib.blake2b(request_id, key=self._key, digest_size=8).digest(), "big")

    def expect(self, records: list[tuple[int, int, bytes]]) -> list[Future[Answer]]:
        """A future for the answer to each record (log, shard, request id) about to be
        appended; RESOURCE_EXHAUSTED when too many requests wait already."""
        waiters: list[Future[Answer]] = [world.future() for _ in records]
        with self._lock:
            if len(self._waiters) + len(records) > limits.PENDING_MAX:
                raise Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              "coordinator: too many requests in flight; retry later")
            for (log_id, shard, rid), w in zip(records, waiters):
                self._waiters.setdefault(rid, []).append(w)
                self._sent[rid] = (log_id, shard)  # answers are taken for these only
                self._sent.move_to_end(rid)
            while len(self._sent) > limits.SENT_RECORDS_MAX:
                self._sent.popitem(last=False)
        return waiters

    def forget(self, rids: list[bytes], waiters: list[Future[Answer]]) -> None:
        """The request is over (answered, timed out or failed): stop waiting."""
        with self._lock:
            for rid, w in zip(rids, waiters):
                ws = self._waiters.get(rid)
                if ws is not None:
                    if w in ws:
                        ws.remove(w)
                    if not ws:
                        del self._waiters[rid]

    def deliver(self, results: Sequence[Answer]) -> None:
        """Storage nodes' answers: every one is digest-checked; only one that a request
        still waits for is decoded (the second replica's answer usually is not). A storage
        node in this process hands over its results undecoded (its local_answers port)."""
        members = self.members()
        for m in results:
            with self._lock:
                sent = self._sent.get(m.request_id)
            secret = self.secret(m.request_id) if answer.over_network(m) else None
            if not answer_expected(sent, members, m, secret):
                self.refused += 1
                REFUSED_ANSWERS.inc()
                continue
            self.check_digest(m)
            with self._lock:
                ws = [w for w in self._waiters.get(m.request_id, ()) if not w.done()]
            for w in ws:
                try:
                    w.set_result(m)  # decoded by the waiter, as much as it needs
                except futures.InvalidStateError:
                    pass

    def check_digest(self, r: Answer) -> None:
        """Replicas that applied the same position must hold the same shard digest."""
        if r.duplicate:
            return
        k = (r.log_id, r.position, r.shard)
        with self._lock:
            seen = self._digests.get(k)
            if seen is None:
                self._digests[k] = (r.digest, r.node_id)
                if len(self._digests) > limits.DIGESTS_KEPT:
                    self._digests.popitem(last=False)
                return
        if seen[0] != r.digest:
            self.divergences += 1
            DIVERGENCES.labels(shard=str(r.shard)).inc()
            log.error("replicas diverge: shard %d at log %d position %d: node %d digest %x, "
                      "node %d digest %x", r.shard, r.log_id, r.position, seen[1], seen[0],
                      r.node_id, r.digest)
