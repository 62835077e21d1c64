"""storage_node/handoff.py: a replica's rule for a shard handed over from one log to another,
checked against a model of the logs, their writers' seals (log/seals.py) and the hand-off's
driver (docs/log.md step 7), under hypothesis: every replica, whatever order its tails run
in, applies each shard's records in the order they were written, with versions that only
grow and log time that never goes back, and its tails never wait on one another for ever."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.checks import check_op
from midtown_pb import kv_pb2 as pb
from record import codec
from record.model import HandOff, Open, Record
from runtime.refusals import Refusal
from storage_node.handoff import Kind, Place, Step, Verdict, step

LOGS, SHARDS = 3, 2


@dataclass(frozen=True)
class Entry:
    kind: Kind
    shard: int
    ts: int
    name: str = ""  # a record's, to compare orders
    to: int = -1
    from_position: int = 0


@dataclass
class World:
    """The logs as the writers sequence them, as a driver and coordinators old and new use
    them: writes go where the shard is routed, or (a coordinator with an old map) to a log
    the shard once lived in, where its writer refuses them if the shard is sealed there."""
    logs: list[list[Entry]] = field(default_factory=lambda: [[] for _ in range(LOGS)])
    sealed: list[set[int]] = field(default_factory=lambda: [set() for _ in range(LOGS)])
    route: dict[int, int | None] = field(default_factory=lambda: {s: s % LOGS for s in range(SHARDS)})
    lived: dict[int, set[int]] = field(default_factory=lambda: {s: {s % LOGS} for s in range(SHARDS)})
    written: dict[int, list[str]] = field(default_factory=lambda: {s: [] for s in range(SHARDS)})
    # shard -> (its driver's next step, from, to) of a hand-off under way
    handing: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    skew: tuple[int, ...] = (0, 0, 0)  # each log writer's clock, ahead or behind
    now: int = 0

    def append(self, log: int, e: Entry) -> None:
        self.logs[log].append(e)

    def ts(self, log: int) -> int:
        last = self.logs[log][-1].ts if self.logs[log] else 0
        return max(self.now + self.skew[log], last)  # a writer's time never goes back

    def write(self, shard: int, stale: int | None) -> None:
        log = self.route[shard] if stale is None else stale
        if log is None or shard in self.sealed[log]:
            return  # waits for the hand-off, or refused whole (sent again by the new map)
        name = f"w{self.now}"
        self.append(log, Entry(Kind.RECORD, shard, self.ts(log), name))
        self.written[shard].append(name)

    def redo(self, shard: int) -> None:
        """A driver killed after its last step, taken up again: that step's record again."""
        st, frm, dest = self.handing.get(shard, (0, -1, -1))
        if st == 1:
            self.append(frm, Entry(Kind.HAND_OFF, shard, self.ts(frm), to=dest,
                                   from_position=len(self.logs[dest])))
        elif st == 2:
            self.append(dest, Entry(Kind.OPEN, shard, self.ts(dest)))

    def drive(self, shard: int, to: int) -> None:
        """The hand-off's driver's next step for `shard` (beginning one to `to` if none is
        under way): seal in the old log (the list and the record at once: the model's
        writer never crashes), then open in the new one (open record; if the new log had
        sealed it, the list's removal and a second open record), then route."""
        st, frm, dest = self.handing.get(shard, (0, self.route[shard], to))
        assert frm is not None
        if st == 0:
            if dest == frm:
                return
            self.route[shard] = None
            self.sealed[frm].add(shard)
            self.append(frm, Entry(Kind.HAND_OFF, shard, self.ts(frm), to=dest,
                                   from_position=len(self.logs[dest])))
        elif st == 1:
            self.append(dest, Entry(Kind.OPEN, shard, self.ts(dest)))
            if shard in self.sealed[dest]:
                self.sealed[dest].discard(shard)
                self.append(dest, Entry(Kind.OPEN, shard, self.ts(dest)))
        else:
            self.route[shard] = dest
            self.lived[shard].add(dest)
            del self.handing[shard]
            return
        self.handing[shard] = (st + 1, frm, dest)


@dataclass
class Replica:
    places: dict[int, Place]
    rule: Callable[..., Step] = step
    at: list[int] = field(default_factory=lambda: [0] * LOGS)
    applied: dict[int, list[tuple[str, int, int]]] = field(
        default_factory=lambda: {s: [] for s in range(SHARDS)})  # (name, version, log time)

    def advance(self, world: World, log: int) -> bool:
        """Apply the next entry of `log`; False if this tail waits (or is at the end)."""
        if self.at[log] >= len(world.logs[log]):
            return False
        e = world.logs[log][self.at[log]]
        place = self.places[e.shard]
        s = self.rule(place, log, self.at[log], e.kind, e.ts, e.to, e.from_position)
        assert s.verdict is not Verdict.STOP, s.why
        if s.verdict is Verdict.WAIT:
            return False
        if s.verdict is Verdict.APPLY and e.kind is Kind.RECORD:
            self.applied[e.shard].append((e.name, place.version(self.at[log]), place.log_time(e.ts)))
        self.places[e.shard] = s.then
        self.at[log] += 1
        return True


actions = st.lists(st.tuples(st.sampled_from(["write", "stale", "drive", "drive", "redo"]),
                             st.integers(0, SHARDS - 1), st.integers(0, LOGS - 1)), max_size=120)


def replicas_agree(rule: Callable[..., Step] = step) -> Callable[[], None]:
    """The property, for replicas that follow `rule`."""
    @settings(max_examples=300, deadline=None, database=None, derandomize=True, report_multiple_bugs=False)
    @given(actions, st.tuples(*[st.sampled_from((-1000, 0, 1000))] * LOGS), st.data())
    def check(plan: list[tuple[str, int, int]], skew: tuple[int, ...], data: st.DataObject) -> None:
        _check(rule, plan, skew, data)
    return check


def _check(rule: Callable[..., Step], plan: list[tuple[str, int, int]], skew: tuple[int, ...],
           data: st.DataObject) -> None:
    world = World(skew=skew)
    for i, (what, shard, log) in enumerate(plan):
        world.now = i
        if what == "write":
            world.write(shard, None)
        elif what == "stale":  # a coordinator whose map is older names a log the shard lived in
            world.write(shard, log if log in world.lived[shard] else None)
        elif what == "redo":
            world.redo(shard)
        else:
            world.drive(shard, log)
    for _ in range(2):  # two replicas, their tails run in orders of their own
        r = Replica({s: Place(s % LOGS) for s in range(SHARDS)}, rule)
        while any(r.at[g] < len(world.logs[g]) for g in range(LOGS)):
            ready = [g for g in range(LOGS) if r.at[g] < len(world.logs[g])]
            g = data.draw(st.sampled_from(ready))
            if not r.advance(world, g):  # it waits: another tail must be able to go on
                assert any(r.advance(world, h) for h in ready if h != g), "the tails wait on one another"
        for s in range(SHARDS):
            assert [n for n, _, _ in r.applied[s]] == world.written[s]
            versions = [v for _, v, _ in r.applied[s]]
            assert versions == sorted(set(versions)), "versions only grow"
            times = [t for _, _, t in r.applied[s]]
            assert times == sorted(times), "log time never goes back"


def test_every_replica_applies_each_shard_in_the_order_it_was_written() -> None:
    replicas_agree()()


def _takes_open_at_once(place: Place, log_id: int, position: int, kind: Kind, ts_ms: int = 0,
                        to: int = -1, from_position: int = 0) -> Step:
    """Broken: a replica that takes the new log's records before it has applied the
    hand-off (the open record met first switches the shard at once)."""
    if log_id != place.log and kind is Kind.OPEN:
        return Step(Verdict.APPLY, Place(log_id, position, True, place.version_base, place.ts_floor))
    return step(place, log_id, position, kind, ts_ms, to, from_position)


def _no_time_floor(place: Place, log_id: int, position: int, kind: Kind, ts_ms: int = 0,
                   to: int = -1, from_position: int = 0) -> Step:
    """Broken: the new log's time taken as its writer stamps it (its machine's clock)."""
    s = step(place, log_id, position, kind, ts_ms, to, from_position)
    return Step(s.verdict, Place(s.then.log, s.then.since, s.then.opened, s.then.version_base, 0), s.why)


@pytest.mark.parametrize("broken", [_takes_open_at_once, _no_time_floor])
def test_the_model_catches_a_broken_rule(broken: Callable[..., Step]) -> None:
    with pytest.raises(AssertionError):
        replicas_agree(broken)()


def test_records_that_cannot_exist_stop_the_replica() -> None:
    awaiting = Place(1, since=10, opened=False)
    assert step(awaiting, 1, 5, Kind.RECORD).verdict is Verdict.SKIP  # before fB: not its business
    assert step(awaiting, 1, 12, Kind.RECORD).verdict is Verdict.STOP  # before the open record
    assert step(awaiting, 1, 12, Kind.OPEN).then == Place(1, 10, True)
    assert step(Place(0), 1, 3, Kind.RECORD).verdict is Verdict.STOP  # in a log it is not in
    assert step(Place(0), 1, 3, Kind.HAND_OFF).verdict is Verdict.SKIP  # a driver's repeat
    assert step(Place(0), 0, 3, Kind.HAND_OFF, to=0).verdict is Verdict.STOP


@pytest.mark.parametrize("skew", [-1000, 0, 1000])
def test_versions_and_time_go_on_across_a_hand_off(skew: int) -> None:
    a = Place(0)
    assert a.version(99) == 100
    s = step(a, 0, 99, Kind.HAND_OFF, ts_ms=5000, to=1, from_position=7)
    b = step(s.then, 1, 8, Kind.OPEN).then
    assert b.opened and b.version(9) > a.version(99)
    assert b.log_time(5000 + skew) >= 5000


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1))
def test_hand_off_and_open_records_round_trip(to: int, start: int, shard: int) -> None:
    for op in (HandOff(to, start), Open()):
        rec = codec.record_from_bytes(codec.record_to_bytes(Record(b"", "", "", shard, b"", (op,))))
        assert rec.ops == (op,) and rec.shard == shard
        assert (rec.hand_off(), rec.opens()) == ((op, False) if isinstance(op, HandOff) else (None, True))


@pytest.mark.parametrize("op", [pb.Op(hand_off=pb.HandOffOp(to_log=1)), pb.Op(open=pb.OpenOp())])
def test_a_client_cannot_send_hand_off_or_open_records(op: pb.Op) -> None:
    with pytest.raises(Refusal) as ei:
        check_op(op, 2)
    assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and ei.value.text.startswith("ops[2]: ")
