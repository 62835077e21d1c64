"""storage_node/handoff.py: a replica's rule for a shard handed over from one log to another,
checked against a model of the logs, their writers' seals (log/seals.py) and the hand-off's
driver (docs/log.md step 7), under hypothesis: every replica, whatever order its tails run
in, applies each shard's records in the order they were written, with versions that only
grow and log time that never goes back, and its tails never wait on one another for ever."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

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
    generation: int = 0  # an open record's


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
    generation: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(SHARDS), 0))
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
            self.append(dest, Entry(Kind.OPEN, shard, self.ts(dest), generation=self.generation[shard]))

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
            self.generation[shard] += 1
            self.append(frm, Entry(Kind.HAND_OFF, shard, self.ts(frm), to=dest,
                                   from_position=len(self.logs[dest])))
        elif st == 1:
            gen = self.generation[shard]
            self.append(dest, Entry(Kind.OPEN, shard, self.ts(dest), generation=gen))
            if shard in self.sealed[dest]:
                self.sealed[dest].discard(shard)
                self.append(dest, Entry(Kind.OPEN, shard, self.ts(dest), generation=gen))
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
    only: int | None = None  # the one shard it applies (a copy's destination)
    mark: tuple[int, int] = (-1, 0)  # (log, position): that shard's records below it are in its copy

    def advance(self, world: World, log: int) -> bool:
        """Apply the next entry of `log`; False if this tail waits (or is at the end)."""
        if self.at[log] >= len(world.logs[log]):
            return False
        e = world.logs[log][self.at[log]]
        if self.only is not None and e.shard != self.only or (log, e.shard) == (self.mark[0], self.only) and \
                self.at[log] < self.mark[1]:
            self.at[log] += 1  # another shard's; or in the copy already
            return True
        place = self.places[e.shard]
        s = self.rule(place, log, self.at[log], e.kind, e.ts, e.to, e.from_position, e.generation)
        assert s.verdict is not Verdict.STOP, s.why
        if s.verdict is Verdict.WAIT:
            return False
        if s.verdict is Verdict.APPLY and e.kind is Kind.RECORD:
            self.applied[e.shard].append((e.name, place.version(self.at[log]), place.log_time(e.ts)))
        if s.then.log != place.log:
            self.mark = (-1, 0)  # a copy's mark counts in the log it was taken in only
        self.places[e.shard] = s.then
        self.at[log] += 1
        return True

    def run(self, world: World, choose: Callable[[list[int]], int], steps: int | None = None) -> None:
        """Its tails, in the order `choose` picks among those not at their log's end, to the
        logs' ends (or `steps` of them)."""
        while steps is None or steps > 0:
            ready = [g for g in range(LOGS) if self.at[g] < len(world.logs[g])]
            if not ready:
                return
            g = choose(ready)
            if not self.advance(world, g):  # it waits: another tail must be able to go on
                assert any(self.advance(world, h) for h in ready if h != g), "the tails wait on one another"
            steps = None if steps is None else steps - 1


actions = st.lists(st.tuples(st.sampled_from(["write", "stale", "drive", "drive", "drive", "redo"]),
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
    def choose(ready: list[int]) -> int:
        return data.draw(st.sampled_from(ready))
    replicas = []
    for _ in range(2):  # two replicas, their tails run in orders of their own
        r = Replica({s: Place(s % LOGS) for s in range(SHARDS)}, rule)
        r.run(world, choose)
        replicas.append(r)
    _copied(world, rule, data.draw(st.integers(0, SHARDS - 1)), choose,
            data.draw(st.integers(0, sum(len(lg) for lg in world.logs))))
    for r in replicas:
        _agrees(world, r)


def _copied(world: World, rule: Callable[..., Step], shard: int, choose: Callable[[list[int]], int],
            after: int) -> None:
    """A replica that takes `shard` by a copy of another replica `after` steps of its tails
    (a move's destination): the copy's place and effects, its tail of the copy's log from
    where the copy stands (with a mark), its other tails from their start, meeting the
    shard's older stints. It applies what was written, as the others do."""
    src = Replica({s: Place(s % LOGS) for s in range(SHARDS)}, rule)
    src.run(world, choose, after)
    p = src.places[shard]
    dest = Replica({s: Place(s % LOGS) for s in range(SHARDS)}, rule, only=shard, mark=(p.log, src.at[p.log]))
    dest.places[shard], dest.applied[shard] = p, list(src.applied[shard])
    dest.run(world, choose)
    assert [n for n, _, _ in dest.applied[shard]] == world.written[shard], "the copy's destination"


def _twice_handed(rule: Callable[..., Step]) -> None:
    """Shard 0 handed from log 0 to 1, then from 1 to 2, a write in each stint, log 0's
    writer's clock a second ahead of the others'; two replicas, one running its tails from
    the first log on, one from the last; and one that takes the shard by a copy at the end,
    whose tail of log 1 meets the older open record."""
    world = World(skew=(1000, -1000, -1000))
    for i, (what, to) in enumerate([("write", 0), *[("drive", 1)] * 3, ("write", 0), *[("drive", 2)] * 3,
                                    ("write", 0)]):
        world.now = i
        if what == "write":
            world.write(0, None)
        else:
            world.drive(0, to)
    assert world.route[0] == 2 and len(world.written[0]) == 3
    for choose in (lambda ready: ready[0], lambda ready: ready[-1]):
        r = Replica({s: Place(s % LOGS) for s in range(SHARDS)}, rule)
        r.run(world, choose)
        _agrees(world, r)
    _copied(world, rule, 0, lambda ready: ready[0], sum(len(lg) for lg in world.logs))


def _agrees(world: World, r: Replica) -> None:
    for s in range(SHARDS):
        assert [n for n, _, _ in r.applied[s]] == world.written[s]
        versions = [v for _, v, _ in r.applied[s]]
        assert versions == sorted(set(versions)), "versions only grow"
        times = [t for _, _, t in r.applied[s]]
        assert times == sorted(times), "log time never goes back"


def test_every_replica_applies_each_shard_in_the_order_it_was_written() -> None:
    replicas_agree()()
    _twice_handed(step)


def _takes_open_at_once(place: Place, log_id: int, position: int, kind: Kind, ts_ms: int = 0,
                        to: int = -1, from_position: int = 0, generation: int = 0) -> Step:
    """Broken: a replica that takes the new log's records before it has applied the
    hand-off (the open record met first switches the shard at once)."""
    if log_id != place.log and kind is Kind.OPEN and generation > place.generation:
        return Step(Verdict.APPLY, replace(place, log=log_id, since=position, opened=True,
                                           generation=generation))
    return step(place, log_id, position, kind, ts_ms, to, from_position, generation)


def _no_time_floor(place: Place, log_id: int, position: int, kind: Kind, ts_ms: int = 0,
                   to: int = -1, from_position: int = 0, generation: int = 0) -> Step:
    """Broken: the new log's time taken as its writer stamps it (its machine's clock)."""
    s = step(place, log_id, position, kind, ts_ms, to, from_position, generation)
    return Step(s.verdict, replace(s.then, ts_floor=0), s.why)


def _waits_for_any_open(place: Place, log_id: int, position: int, kind: Kind, ts_ms: int = 0,
                        to: int = -1, from_position: int = 0, generation: int = 0) -> Step:
    """Broken: a replica that waits at every open record of the shard in another log, an
    older stint's too (one that took the shard by a copy waits for ever)."""
    if log_id != place.log and kind is Kind.OPEN:
        return Step(Verdict.WAIT, place)
    return step(place, log_id, position, kind, ts_ms, to, from_position, generation)


@pytest.mark.parametrize("broken,finding", [(_takes_open_at_once, "assert"), (_no_time_floor, "time")])
def test_the_model_catches_a_broken_rule(broken: Callable[..., Step], finding: str) -> None:
    """Each on the targeted history (hypothesis's search finds them too, but whether within
    its examples depends on its draws, so the suite does not lean on it)."""
    with pytest.raises(AssertionError, match=finding):
        _twice_handed(broken)


def test_a_replica_that_waits_at_an_older_stints_open_record_is_caught() -> None:
    """(The whole-cluster simulation's seed 2 with hand-offs: a move's destination of a
    shard handed over twice met the older open record and stopped; waiting there, it would
    wait for ever.)"""
    with pytest.raises(AssertionError, match="wait on one another"):
        _twice_handed(_waits_for_any_open)


def test_what_a_replica_does_with_each_record_of_a_shard() -> None:
    awaiting = Place(1, since=10, opened=False)
    assert step(awaiting, 1, 5, Kind.RECORD).verdict is Verdict.SKIP  # before fB: not its business
    assert step(awaiting, 1, 12, Kind.RECORD).verdict is Verdict.STOP  # before the open record
    assert step(awaiting, 1, 12, Kind.OPEN).then == Place(1, 10, True)
    assert step(awaiting, 1, 12, Kind.OPEN, generation=2).verdict is Verdict.STOP  # not its stint's
    # in another log: of an older stint (applied, or in a copy), or a driver's repeat
    assert step(Place(0, generation=2), 1, 3, Kind.RECORD).verdict is Verdict.SKIP
    assert step(Place(0), 1, 3, Kind.HAND_OFF).verdict is Verdict.SKIP
    assert step(Place(0, generation=2), 1, 3, Kind.OPEN, generation=2).verdict is Verdict.SKIP
    assert step(Place(0, generation=2), 1, 3, Kind.OPEN, generation=3).verdict is Verdict.WAIT
    assert step(Place(0), 0, 3, Kind.HAND_OFF, to=0).verdict is Verdict.STOP
    # a hand-off record of an earlier stint here, delivered late (make soak, seed 101382):
    # skipped awaiting the open record and once opened; one of the stint's own applies
    back = Place(0, since=45, opened=False, generation=2)
    assert step(back, 0, 48, Kind.HAND_OFF, to=1, ends=0).verdict is Verdict.SKIP
    assert step(back, 0, 48, Kind.HAND_OFF, to=1).verdict is Verdict.STOP  # not said: as before
    opened = Place(0, since=45, opened=True, generation=2)
    assert step(opened, 0, 50, Kind.HAND_OFF, to=1, ends=0).verdict is Verdict.SKIP
    assert step(opened, 0, 50, Kind.HAND_OFF, to=1, ends=2).then.log == 1


@pytest.mark.parametrize("skew", [-1000, 0, 1000])
def test_versions_and_time_go_on_across_a_hand_off(skew: int) -> None:
    a = Place(0)
    assert a.version(99) == 100
    s = step(a, 0, 99, Kind.HAND_OFF, ts_ms=5000, to=1, from_position=7)
    b = step(s.then, 1, 8, Kind.OPEN, generation=1).then
    assert b.opened and b.version(9) > a.version(99)
    assert b.log_time(5000 + skew) >= 5000


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1),
       st.one_of(st.none(), st.integers(0, 2**32 - 1)))
def test_hand_off_and_open_records_round_trip(to: int, start: int, shard: int, ends: int | None) -> None:
    for op in (HandOff(to, start, ends), Open(shard)):
        rec = codec.record_from_bytes(codec.record_to_bytes(Record(b"", "", "", shard, b"", (op,))))
        assert rec.ops == (op,) and rec.shard == shard
        assert (rec.hand_off(), rec.opens()) == ((op, False) if isinstance(op, HandOff) else (None, True))


@pytest.mark.parametrize("op", [pb.Op(hand_off=pb.HandOffOp(to_log=1)), pb.Op(open=pb.OpenOp())])
def test_a_client_cannot_send_hand_off_or_open_records(op: pb.Op) -> None:
    with pytest.raises(Refusal) as ei:
        check_op(op, 2)
    assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and ei.value.text.startswith("ops[2]: ")
