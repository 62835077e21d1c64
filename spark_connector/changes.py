"""A Spark streaming source of a dataset's changes (`spark.readStream.format("midtown")`
with option changes=true; docs/spark.md, "Streaming reads").

An offset is a position per shard (JSON: {"0": 120, "1": 98}): every change below it has
been read. The latest offset is where each shard stands now (`Client.positions`: every
write acknowledged before is below it). A micro-batch from offset A to offset B reads, for
each shard, the changes at positions in [A, B): a closed range of the shard's log, so a
batch Spark runs again after a failure reads exactly the same changes, in the same order,
as long as they are within the cluster's change retention (an hour by default). With a
sink that writes each change once by an id (the midtown sink's id_column), the pipeline is
exactly once end to end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from spark_connector.options import INTERNAL_PARTITION_PREFIX, ChangeOptions, Connection, OptionError


def schema(decode: bool) -> str:
    t = "string" if decode else "binary"
    return (f"shard int, position long, kind string, partition_key {t}, local_key {t}, value {t}, "
            "version long, expires_at long, log_time long, change_id string")


def change_id(shard: int, position: int, kind: str, partition_key: bytes, local_key: bytes) -> str:
    """An id unique to one change of a dataset (one key changes at most once per kind at a
    position), the same every time the change is read: an exactly-once sink's id."""
    return f"{shard}/{position}/{kind}/{partition_key.hex()}/{local_key.hex()}"


@dataclass(frozen=True)
class ChangesPartition(InputPartition):  # type: ignore[misc]
    """One shard's changes at positions [start, end)."""
    shard: int
    start: int
    end: int


def _driver_client(conn: Connection) -> Any:
    return conn.shared()  # on the driver: one client per cluster, for the offsets


def _offset(positions: dict[int, int]) -> dict[str, int]:
    return {str(s): p for s, p in sorted(positions.items())}


class MidtownChangeReader(DataSourceStreamReader):
    def __init__(self, o: ChangeOptions, shards: int) -> None:
        self.o = o
        self.shards = shards
        if o.start is not None and max(o.start) >= shards:
            raise OptionError(f"startingPositions: shard {max(o.start)}, this cluster has shards "
                              f"0..{shards - 1}")
        # Per shard, positions [lo, hi) known to hold no change of the dataset (of
        # partition_key, if given): checked on the driver, so a batch's read of that shard
        # starts at hi. The offset a query stands at stays put while its shards are quiet.
        self.quiet: dict[int, tuple[int, int]] = {}
        self._last: dict[int, int] | None = None  # the offset last returned (Spark < 4.2 passes no start)

    def _now(self) -> dict[int, int]:
        return _driver_client(self.o.conn).positions(self.o.dataset, partition_key=self.o.partition_key)

    def initialOffset(self) -> dict:
        return _offset(self.o.start if self.o.start is not None else self._now())

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """Where each shard stands now if the dataset changed since `start` (no read limit: a
        batch takes every change so far), else `start` itself: the log moves with other
        datasets' writes, the sink's commits and the writer's time marks, and an offset that
        moved with them made Spark plan an empty batch on every trigger (a task per shard),
        so `processAllAvailable()` never returned. Spark 4.2 passes the start and a limit;
        earlier versions neither (the offset last returned is the start then)."""
        now = self._now()
        base = {int(k): int(v) for k, v in start.items()} if start is not None else self._last
        if base is None:
            self._last = now
            return _offset(now)
        check: dict[int, int] = {}
        for s, p in now.items():
            b = base.get(s, p)
            lo, hi = self.quiet.get(s, (b, b))
            frm = hi if lo <= b <= hi else b
            if p > frm:
                check[s] = frm
            if not lo <= b <= hi:
                self.quiet[s] = (b, b)
        first = self._first_changes(check, now)
        for s, frm in check.items():
            lo, _ = self.quiet.get(s, (base.get(s, frm), frm))
            self.quiet[s] = (lo, first.get(s, now[s]))
        out = dict(now) if first else {s: base.get(s, p) for s, p in now.items()}
        self._last = out
        return _offset(out)

    def _first_changes(self, frm: dict[int, int], until: dict[int, int]) -> dict[int, int]:
        """The position of the first change of the dataset in [frm, until) of each shard of
        `frm` that has one (the connector's own bookkeeping rows are not changes)."""
        if not frm:
            return {}
        first: dict[int, int] = {}
        db = _driver_client(self.o.conn)
        ends = {s: until[s] for s in frm}
        with db.watch(self.o.dataset, dict(frm), until=ends, partition_key=self.o.partition_key) as w:
            for c in w:
                if not c.partition_key.startswith(INTERNAL_PARTITION_PREFIX):
                    first.setdefault(c.shard, c.position)
                at = w.positions
                if all(s in first or at.get(s, 0) >= e for s, e in ends.items()):
                    break
        return first

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        out: list[InputPartition] = []
        for s, e in sorted(end.items(), key=lambda kv: int(kv[0])):
            shard, b, e = int(s), int(start.get(s, e)), int(e)
            lo, hi = self.quiet.get(shard, (b, b))
            if lo <= b < hi:
                b = min(hi, e)  # nothing of the dataset below hi: not read again
            if e > b:
                out.append(ChangesPartition(shard, b, e))
        return out

    def read(self, partition: InputPartition) -> Any:
        assert isinstance(partition, ChangesPartition)
        o = self.o
        p = partition
        db = o.conn.shared()
        for c in db.watch(o.dataset, {p.shard: p.start}, until={p.shard: p.end},
                          partition_key=o.partition_key):
            pk, lk = c.partition_key, c.local_key
            if pk.startswith(INTERNAL_PARTITION_PREFIX):
                continue  # a sink's bookkeeping rows (its streaming commits): no change of the data
            value = c.value
            if o.decode:
                pk, lk = pk.decode(errors="replace"), lk.decode(errors="replace")  # type: ignore[assignment]
                value = value.decode(errors="replace") if value is not None else None  # type: ignore[assignment]
            yield (c.shard, c.position, c.kind, pk, lk, value, c.version, c.expires_at_ms, c.log_time_ms,
                   change_id(c.shard, c.position, c.kind, c.partition_key, c.local_key))

    def commit(self, end: dict) -> None:
        """Nothing to release: the changes stay for the retention whatever is read."""
