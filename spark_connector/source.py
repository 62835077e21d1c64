"""The `midtown` data source for PySpark 4 (pyspark.sql.datasource): reads one input
partition per shard (per split of a shard larger than split.sizeInMB), as Arrow batches;
writes through bulk calls with optional event ids (exactly once per id), and a streaming
sink whose batch commits are recorded in Midtown with check-and-set.
docs/spark.md says what each guarantees. Clients are opened inside tasks (Spark workers
fork: PITFALLS.md), never pickled from the driver."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from spark_connector import changes
from spark_connector import options as opt
from spark_connector.options import OptionError, ReadOptions, WriteOptions
from spark_connector.writing import Counts, check_schema, rows_of, write_rows

log = logging.getLogger("midtown.spark")

# Where a streaming query's last committed batch is recorded, in the dataset it writes:
# this partitioning key, local key = the query id. Reads through the connector skip it.
STREAM_STATE_PARTITION = b"\x00midtown-streams"


# Spark refuses to plan a read of a Python source that implements pushFilters unless this
# is on (off by default in Spark 4.1-4.3); register() turns it on in the session it is given.
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any, source: type[DataSource] | None = None) -> None:
    """Make `spark.read.format("midtown")` and `df.write.format("midtown")` (and their
    streaming forms) available, from any thread of the session, in a session built the
    plain way: filter pushdown is turned on in it (PUSHDOWN_CONF), a save with no mode
    appends (the only mode the source takes), and the name is taken in any case. Again is
    harmless. `source`: a variant of the source under a name of its own (`make demo`'s)."""
    from pyspark.errors import AnalysisException

    try:
        spark.dataSource.register(source or MidtownDataSource)
    except AnalysisException as e:  # registered before: sessions of one context share sources
        if e.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
            raise
    spark.conf.set(PUSHDOWN_CONF, "true")
    _found_from_any_thread()


def _found_from_any_thread() -> None:
    """Spark finds a Python data source through the calling thread's *active* session (a
    JVM thread-local), which a thread started after the session lacks: saving from such a
    thread failed with DATA_SOURCE_NOT_FOUND. So `format("midtown")` (in any case, as
    Spark's own names are) on a reader or writer makes its own session the thread's active
    one first (as createDataFrame does), with pushdown on; on a batch writer whose mode was
    not set, it sets append (Spark's default, ErrorIfExists, is refused with a message
    offering Overwrite, which the source refuses too). Done once per process; other formats
    are untouched."""
    from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter
    from pyspark.sql.streaming.readwriter import DataStreamReader, DataStreamWriter

    if getattr(DataFrameWriter.mode, "midtown_mode_kept", False):
        return
    original_mode = DataFrameWriter.mode

    def mode(self: Any, saveMode: Any) -> Any:
        self._midtown_mode_set = True
        return original_mode(self, saveMode)

    mode.midtown_mode_kept = True  # type: ignore[attr-defined]
    mode.__doc__ = original_mode.__doc__
    DataFrameWriter.mode = mode  # type: ignore[method-assign]
    for cls in (DataFrameReader, DataFrameWriter, DataStreamReader, DataStreamWriter):
        original = cls.format

        def format(self: Any, source: str, _original: Any = original) -> Any:
            if isinstance(source, str) and source.lower() == MidtownDataSource.name():
                spark = self._spark
                spark._get_j_spark_session_class(spark._jvm).setActiveSession(spark._jsparkSession)
                spark.conf.set(PUSHDOWN_CONF, "true")
                if isinstance(self, DataFrameWriter) and not getattr(self, "_midtown_mode_set", False):
                    original_mode(self, "append")
            return _original(self, source)

        format.__doc__ = original.__doc__
        cls.format = format  # type: ignore[method-assign]


def _fields(schema: StructType) -> dict[str, str]:
    return {f.name: type(f.dataType).__name__ for f in schema.fields}


def _check_dataset(conn: opt.Connection, dataset: str) -> int:
    """The cluster's shard count, checking on the driver that the dataset exists."""
    from midtown import errors

    wait = min(conn.timeout_s, opt.PLANNING_TIMEOUT_S)
    try:
        with conn.client(timeout_s=wait) as db:
            return db.shards(dataset)
    except errors.NotFound:
        raise OptionError(f"dataset: no dataset {dataset!r} in this cluster") from None
    except errors.MidtownError as e:
        option = "zk" if conn.zk else "coordinators"
        raise OptionError(f"{option}: cannot reach the Midtown cluster through {conn.where()} within "
                          f"{wait:g}s ({e.code.name}: {e.message})") from None


class MidtownDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "midtown"

    def schema(self) -> str:
        decode = self.options.get("decode", "binary") == "utf8"
        if opt.changes_asked(self.options):
            return changes.schema(decode)
        t = "string" if decode else "binary"
        return (f"partition_key {t}, local_key {t}, value {t}, version long, expires_at long")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        o = opt.change_options(self.options)
        return changes.MidtownChangeReader(o, _check_dataset(o.conn, o.dataset))

    def reader(self, schema: StructType) -> DataSourceReader:
        if opt.changes_asked(self.options):
            raise OptionError("changes: a dataset's changes are read as a stream (spark.readStream); "
                              "a batch read reads its keys")
        o = opt.read_options(self.options)
        return MidtownReader(o, _check_dataset(o.conn, o.dataset))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("mode: 'overwrite' is refused: the midtown data source does not replace "
                              "a dataset's contents; use mode('append'), or no mode (docs/spark.md)")
        o = opt.write_options(self.options)
        check_schema(o, _fields(schema))
        _check_dataset(o.conn, o.dataset)
        return MidtownWriter(o)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        o = opt.write_options(self.options)
        check_schema(o, _fields(schema))
        _check_dataset(o.conn, o.dataset)
        return MidtownStreamWriter(o)


# ---------------------------------------------------------------------------- reads
@dataclass(frozen=True)
class ShardPartition(InputPartition):  # type: ignore[misc]
    """A whole shard, read from a view its task opens."""
    shard: int


@dataclass(frozen=True)
class ShardsPartition(InputPartition):  # type: ignore[misc]
    """Whole shards read one after another by one task, each from a view it opens: small
    shards packed together (pack_shards), so that a task is not spent per small shard."""
    shards: tuple[int, ...]


@dataclass(frozen=True)
class SplitPartition(InputPartition):  # type: ignore[misc]
    """A key range of a shard larger than split.sizeInMB, from the view the driver's plan
    opened (every split of the shard reads the same position)."""
    shard: int
    token: bytes


@dataclass(frozen=True)
class KeyPartition(InputPartition):  # type: ignore[misc]
    partition_key: bytes


_RANGE_FILTERS = (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
PLAN_THREADS = 16  # shards split at once on the driver (their views are shared: storage_node/views.py)


def _key(v: Any) -> bytes:
    return v.encode() if isinstance(v, str) else bytes(v)


class MidtownReader(DataSourceReader):
    def __init__(self, o: ReadOptions, shards: int) -> None:
        self.o = o
        self.shards = shards

    def pushFilters(self, filters: list[Any]) -> Any:
        """`partition_key = X` reads that partitioning key only, and then `local_key` ranges
        (>, >=, <, <=) read that range only (Spark 4.1+, with
        spark.sql.python.filterPushdown.enabled); every other filter stays with Spark."""
        filters = list(filters)
        for f in filters:
            if isinstance(f, EqualTo) and f.attribute == ("partition_key",) and self.o.partition_key is None:
                self.o = replace(self.o, partition_key=_key(f.value))
                filters.remove(f)
                break
        rest = []
        for f in filters:
            if (self.o.partition_key is not None and isinstance(f, _RANGE_FILTERS)
                    and f.attribute == ("local_key",)):
                v = _key(f.value)
                if isinstance(f, GreaterThan | GreaterThanOrEqual):
                    start = v + b"\x00" if isinstance(f, GreaterThan) else v
                    self.o = replace(self.o, start=max(self.o.start, start))
                else:
                    end = v + b"\x00" if isinstance(f, LessThanOrEqual) else v
                    self.o = replace(self.o, end=min(self.o.end, end) if self.o.end else end)
                continue
            rest.append(f)
        return rest

    def partitions(self) -> list[InputPartition]:
        """One per shard, or per split of a shard larger than split.sizeInMB (the driver
        asks each shard's splits, which reads the shard's keys once on a storage node)."""
        from concurrent.futures import ThreadPoolExecutor

        o = self.o
        if o.partition_key is not None:
            return [KeyPartition(o.partition_key)]
        with o.conn.client() as db, ThreadPoolExecutor(PLAN_THREADS) as pool:
            plans = list(pool.map(lambda s: db.shard_splits(o.dataset, s, split_bytes=o.split_bytes,
                                                             consistency=o.consistency), range(self.shards)))
        out: list[InputPartition] = []
        whole: dict[int, int] = {}
        for shard, p in enumerate(plans):
            if len(p.splits) == 1:
                whole[shard] = p.splits[0].bytes
            else:
                out += [SplitPartition(shard, s.token) for s in p.splits]
        return [ShardsPartition(g) for g in pack_shards(whole, o.split_bytes, MIN_PARTITIONS)] + out

    def read(self, partition: InputPartition) -> Any:
        """Arrow record batches, one per page read (fetch.sizeInRows rows at most)."""
        o = self.o
        db = o.conn.shared()  # kept for the worker's next tasks
        if isinstance(partition, KeyPartition):
            rows: list[tuple[bytes, bytes, Any]] = []
            for it in db.scan_all(o.dataset, partition.partition_key, start=o.start, end=o.end,
                                  page=o.page_rows, consistency=o.consistency):
                rows.append((partition.partition_key, it.local_key, it.value))
                if len(rows) >= o.page_rows:
                    yield _batch(rows, o.decode)
                    rows = []
            if rows:
                yield _batch(rows, o.decode)
            return
        assert isinstance(partition, ShardsPartition | ShardPartition | SplitPartition)
        parts = ([(s, b"") for s in partition.shards] if isinstance(partition, ShardsPartition) else
                 [(partition.shard, partition.token if isinstance(partition, SplitPartition) else b"")])
        for shard, token in parts:
            # Each page comes as an Arrow record batch built by the storage node: no row is
            # handled alone from there to Spark.
            for page in db.scan_shard(o.dataset, shard, consistency=o.consistency,
                                      page=o.page_rows, token=token, arrow=True):
                batch = _ours(page.arrow)
                if batch.num_rows:
                    yield _decoded(batch) if o.decode else batch


# Whole shards are packed into partitions of about split.sizeInMB, into no fewer than this
# many (fewer only with fewer shards), so that a small dataset is still read by several tasks.
MIN_PARTITIONS = 4


def pack_shards(sizes: dict[int, int], split_bytes: int, least: int) -> list[tuple[int, ...]]:
    """Shards (id -> bytes) in groups of about `split_bytes` each, at least `least` groups
    (or one per shard, if fewer), the largest shards placed first, each into the group
    holding least so far (of equal ones, the one with fewest shards); each group in shard
    order. Pure."""
    if not sizes:
        return []
    total = sum(sizes.values())
    n = min(len(sizes), max(least, -(-total // max(1, split_bytes))))
    bins: list[tuple[int, list[int]]] = [(0, []) for _ in range(n)]
    for shard in sorted(sizes, key=lambda s: (-sizes[s], s)):
        i = min(range(n), key=lambda j: (bins[j][0], len(bins[j][1]), j))
        bins[i] = (bins[i][0] + sizes[shard], bins[i][1] + [shard])
    return [tuple(sorted(b)) for _, b in bins if b]


def _ours(batch: Any) -> Any:
    """The batch without the sink's own bookkeeping rows (partitioning keys starting with
    INTERNAL_PARTITION_PREFIX)."""
    import pyarrow.compute as pc

    if not batch.num_rows:
        return batch
    internal = pc.starts_with(batch.column(0), pattern=opt.INTERNAL_PARTITION_PREFIX)
    return batch.filter(pc.invert(internal)) if pc.any(internal).as_py() else batch


def _decoded(batch: Any) -> Any:
    """The batch with its keys and value as strings (the `decode` option): cast at once when
    they are valid UTF-8, else row by row with replacement characters, as _batch does."""
    import pyarrow as pa

    try:
        cols = [batch.column(i).cast(pa.string()) for i in range(3)]
    except pa.ArrowInvalid:
        cols = [pa.array([x.decode(errors="replace") for x in batch.column(i).to_pylist()], type=pa.string())
                for i in range(3)]
    return pa.RecordBatch.from_arrays([*cols, batch.column(3), batch.column(4)], names=batch.schema.names)


def _batch(rows: list[tuple[bytes, bytes, Any]], decode: bool) -> Any:
    """The rows (partition key, local key, Value) as an Arrow record batch of the source's
    schema (MidtownDataSource.schema)."""
    import pyarrow as pa

    t = pa.string() if decode else pa.binary()

    def col(xs: list[bytes]) -> Any:
        return pa.array([x.decode(errors="replace") for x in xs] if decode else xs, type=t)

    return pa.RecordBatch.from_arrays(
        [col([r[0] for r in rows]), col([r[1] for r in rows]), col([r[2].value for r in rows]),
         pa.array([r[2].version for r in rows], type=pa.int64()),
         pa.array([r[2].expires_at_ms or None for r in rows], type=pa.int64())],
        names=["partition_key", "local_key", "value", "version", "expires_at"])


# ---------------------------------------------------------------------------- writes
@dataclass
class MidtownCommitMessage(WriterCommitMessage):  # type: ignore[misc]
    counts: Counts
    query_id: str = ""
    batch_id: int = -1
    skipped: bool = False  # a streaming batch already committed: nothing written


def _total(messages: list[Any]) -> Counts:
    c = Counts()
    for m in messages:
        if isinstance(m, MidtownCommitMessage):
            c.add(m.counts)
    return c


class MidtownWriter(DataSourceWriter):
    """Each task writes its rows in bulk calls; with `id_column`, each row at most once per
    id, so a task run again (or twice at once) applies nothing twice. Rows are visible as
    soon as their call returns, before the job commits."""

    def __init__(self, o: WriteOptions) -> None:
        self.o = o

    def write(self, iterator: Any) -> MidtownCommitMessage:
        db = self.o.conn.shared()  # kept for the worker's next tasks
        counts = write_rows(self.o, rows_of(iterator), lambda ws: db.write_many(self.o.dataset, ws))
        return MidtownCommitMessage(counts)

    def commit(self, messages: list[Any]) -> None:
        total = _total(messages)
        log.warning("midtown: wrote %s into %s", total.summary(), self.o.dataset)
        if self.o.report:
            total.write_report(self.o.report, "committed" if not total.failed else "failed")
        if total.failed:
            raise RuntimeError(f"midtown: {total.failed} of {total.rows} rows were refused and the "
                               f"{total.applied + total.duplicates} others written: {total.failures()}. "
                               "Running the job again refuses them again: fix these rows")

    def abort(self, messages: list[Any]) -> None:
        # Nothing is undone: a row whose call returned is applied, one whose call failed has
        # an unknown outcome; with event ids, running the job again completes it exactly.
        total = _total(messages)
        if self.o.report:
            total.write_report(self.o.report, "aborted")
        log.warning("midtown: job aborted after %s into %s; nothing undone. %s", total.summary(),
                    self.o.dataset, abort_advice(total, bool(self.o.id_column)))


def abort_advice(total: Counts, with_ids: bool) -> str:
    """What to do after an aborted job, for this job: rows the store refused are refused
    again by any re-run; a re-run without id_column writes again what was written."""
    if total.failed:
        return (f"{total.failed} rows were refused ({total.failures()}): running the job again "
                "refuses them again; fix them, or leave them out")
    if with_ids:
        return "Run it again: with id_column each event is applied once"
    return ("Running it again writes again the rows already written (puts the same values, "
            "increments counted again): set id_column for exactly once")


class StreamConflict(RuntimeError):
    """Another running copy of the streaming query writes under the same query id."""


class MidtownStreamWriter(DataSourceStreamWriter):
    """Micro-batches through the same exactly-once path; each batch's commit records
    (query id, batch id) in Midtown with check-and-set. A batch replayed after a restart is
    recognised and skipped whole; a second copy of the query (another checkpoint, the same
    query id) fails instead of writing."""

    def __init__(self, o: WriteOptions) -> None:
        self.o = o

    def write(self, iterator: Any) -> MidtownCommitMessage:
        from pyspark import TaskContext

        tc = TaskContext.get()
        assert tc is not None, "a streaming write runs in a Spark task"
        spark_qid = tc.getLocalProperty("sql.streaming.queryId") or ""
        batch_id = int(tc.getLocalProperty("streaming.sql.batchId") or -1)
        qid = self.o.query_id or spark_qid
        with self.o.conn.client() as db:
            state = _stream_state(db, self.o.dataset, qid)
            mine = claim(state, qid, spark_qid, _now_ms(), self.o.lease_s, self.o.takeover)
            if mine and state is not None and state["batch"] >= batch_id:
                n = sum(1 for _ in iterator)
                return MidtownCommitMessage(Counts(rows=n), spark_qid, batch_id, skipped=True)
            counts = write_rows(self.o, rows_of(iterator), lambda ws: db.write_many(self.o.dataset, ws))
        return MidtownCommitMessage(counts, spark_qid, batch_id)

    def commit(self, messages: list[Any], batchId: int) -> None:
        mine = [m for m in messages if isinstance(m, MidtownCommitMessage)]
        if not mine:
            return
        spark_qid = mine[0].query_id
        qid = self.o.query_id or spark_qid
        total = _total(mine)
        if total.failed:
            raise RuntimeError(f"midtown: batch {batchId}: {total.failed} of {total.rows} rows were "
                               f"refused: {total.failures()}")
        with self.o.conn.client() as db:
            _record_batch(db, self.o, qid, spark_qid, batchId)
        what = "skipped (committed before)" if all(m.skipped for m in mine) else total.summary()
        log.warning("midtown: query %s batch %d into %s: %s", qid, batchId, self.o.dataset, what)

    def abort(self, messages: list[Any], batchId: int) -> None:
        log.warning("midtown: batch %d aborted after %s; nothing undone (the replay writes each event "
                    "once)", batchId, _total(messages).summary())


def _stream_state(db: Any, dataset: str, qid: str) -> dict | None:
    v = db.get(dataset, STREAM_STATE_PARTITION, qid)
    return json.loads(v.value) if v is not None else None


def _now_ms() -> int:
    return int(time.time() * 1000)


def claim(state: dict | None, qid: str, spark_qid: str, now_ms: int, lease_s: int, takeover: bool) -> bool:
    """Whether the streaming query `qid`, as the Spark query `spark_qid`, may write: True
    if it owns the query id (its own batches: a replayed one is skipped), False if it may
    take the id over (no state yet; another copy whose last commit is more than `lease_s`
    old, by the drivers' clocks, so it is taken to be stopped; or `takeover`). Raises
    StreamConflict naming the running copy otherwise."""
    if state is None:
        return False
    if state["owner"] == spark_qid:
        return True
    age_s = (now_ms - int(state.get("committed_ms", 0))) / 1000
    if takeover or age_s > lease_s:
        return False
    raise StreamConflict(
        f"midtown: streaming query {qid!r} is written by another running copy (Spark query "
        f"{state['owner']}, which committed batch {state['batch']} {max(age_s, 0):.0f}s ago, within the "
        f"{lease_s}s lease): stop one of them, or give each its own query_id option. A copy "
        f"that is stopped (a lost checkpoint) is taken over {lease_s}s after its last commit, "
        "or at once with option takeover=true (docs/spark.md)")


def _record_batch(db: Any, o: WriteOptions, qid: str, spark_qid: str, batch_id: int) -> None:
    """Record that `batch_id` of query `qid` committed, with the time (the lease a running
    copy renews), by check-and-set against what was read: exactly one copy of a query can
    move it on."""
    dataset = o.dataset
    for _ in range(10):
        cur = db.get(dataset, STREAM_STATE_PARTITION, qid)
        state = json.loads(cur.value) if cur is not None else None
        mine = claim(state, qid, spark_qid, _now_ms(), o.lease_s, o.takeover)
        if mine and state is not None and state["batch"] >= batch_id:
            return  # a replay of a committed batch
        new = json.dumps({"owner": spark_qid, "batch": batch_id, "committed_ms": _now_ms()}).encode()
        r = (db.cas(dataset, STREAM_STATE_PARTITION, qid, new, expect_absent=True) if cur is None else
             db.cas(dataset, STREAM_STATE_PARTITION, qid, new, expected=cur.value,
                    expected_version=cur.version))
        if r.succeeded:
            if state is not None and not mine:
                log.warning("midtown: streaming query %s taken over from Spark query %s (its last "
                            "commit, batch %s, was %.0fs ago)", qid, state["owner"], state["batch"],
                            (_now_ms() - int(state.get("committed_ms", 0))) / 1000)
            return
    raise StreamConflict(f"midtown: streaming query {qid!r}: its commit record kept changing; "
                         "is another copy running?")
