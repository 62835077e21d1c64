"""A shard scan's page as one Arrow record batch (ScanShardRequest.arrow): the items go in
columns, so nothing after the storage node handles them one by one. The coordinator
relays the page as bytes, and the Spark data source hands the batch to Spark as it came
(spark_connector/source.py). pyarrow is imported on the first such page only."""

from __future__ import annotations

NAMES = ("partition_key", "local_key", "value", "version", "expires_at")


class Columns:
    """A page's items, gathered column by column."""

    def __init__(self) -> None:
        self.pkeys: list[bytes] = []
        self.lkeys: list[bytes] = []
        self.values: list[bytes] = []
        self.versions: list[int] = []
        self.expiries: list[int | None] = []

    def __len__(self) -> int:
        return len(self.pkeys)

    def add(self, pkey: bytes, lkey: bytes, value: bytes, version: int, expires_at_ms: int) -> None:
        self.pkeys.append(pkey)
        self.lkeys.append(lkey)
        self.values.append(value)
        self.versions.append(version)
        self.expiries.append(expires_at_ms or None)

    def ipc(self) -> bytes:
        """The page as an Arrow IPC stream of one record batch."""
        import pyarrow as pa

        batch = pa.RecordBatch.from_arrays(
            [pa.array(self.pkeys, pa.binary()), pa.array(self.lkeys, pa.binary()),
             pa.array(self.values, pa.binary()), pa.array(self.versions, pa.int64()),
             pa.array(self.expiries, pa.int64())], names=list(NAMES))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as w:
            w.write_batch(batch)
        return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]
