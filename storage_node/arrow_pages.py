"""A shard scan's page as one Arrow record batch (ScanShardRequest.arrow): the stored keys
and values are gathered as they are read, then cut into columns with array operations
(numpy over the Arrow buffers, Arrow's kernels), so no item is handled alone in Python after RocksDB's
iterator, and nothing after the storage node handles them one by one. The coordinator
relays the page as bytes, and the Spark data source hands the batch to Spark as it came
(spark_connector/source.py). pyarrow and numpy are imported on the first such page only.

Measured (300,000 items of 100-byte values, one process): 1.8 µs an item against 3.9-6.9
when each item was decoded into Python objects first (docs/spark.md); with the value
sliced by Arrow and a page loop of its own (storage_node/reads.py), 1.59 -> 0.85 µs an item
(a scratch timing, the machine loaded: docs/performance.md, the Spark read)."""

from __future__ import annotations

from typing import Any

from storage_node.keys import PARTITION_LENGTH_BYTES, STORED_HEADER_BYTES

NAMES = ("partition_key", "local_key", "value", "version", "expires_at")


def ipc(keys: list[bytes], values: list[bytes], prefix_len: int, log_time_ms: int) -> bytes:
    """A page's stored entries as read (value keys, stored values), the live ones at
    `log_time_ms` (storage_node/keys.py's value key after a dataset-and-shard prefix of
    `prefix_len` bytes; keys.decode_stored's value), as an Arrow IPC stream of one record
    batch."""
    import pyarrow as pa

    batch = columns(keys, values, prefix_len, log_time_ms)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def columns(keys: list[bytes], values: list[bytes], prefix_len: int, log_time_ms: int) -> Any:
    """The record batch of the entries live at `log_time_ms` (an expiry of 0: none; else
    live while after the log time, as record.model.Stored.live_at)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(keys)
    karr, varr = pa.array(keys, pa.binary()), pa.array(values, pa.binary())
    k_off, k_data = _buffers(karr, n)
    v_off, v_data = _buffers(varr, n)
    version = _uint(v_data, v_off[:-1], 8)
    expiry = _uint(v_data, v_off[:-1] + 8, 8)
    at = k_off[:-1] + prefix_len
    pk_len = _uint(k_data, at, PARTITION_LENGTH_BYTES)
    pk_start = at + PARTITION_LENGTH_BYTES
    lk_start = pk_start + pk_len
    # The value follows a header of fixed size: sliced in Arrow's own kernel (a gather of
    # its bytes took 40 times as long, half of a page's cost). The slice's end is given:
    # left out, pyarrow 26 failed on a page of 10,000 ("Negative buffer resize").
    end = int(np.diff(v_off).max()) if n else STORED_HEADER_BYTES
    batch = pa.RecordBatch.from_arrays(
        [_gather(k_data, pk_start, pk_len), _gather(k_data, lk_start, k_off[1:] - lk_start),
         pc.binary_slice(varr, STORED_HEADER_BYTES, end),
         pa.array(version.astype(np.int64)), pa.array(expiry.astype(np.int64), mask=expiry == 0)],
        names=list(NAMES))
    live = (expiry == 0) | (expiry > log_time_ms)
    return batch if live.all() else batch.filter(pa.array(live))


def _buffers(arr: Any, n: int) -> tuple[Any, Any]:
    """(offsets as int64, data bytes) of a binary array built from a list."""
    import numpy as np

    offsets = np.frombuffer(arr.buffers()[1], np.int32, count=n + 1).astype(np.int64)
    data = arr.buffers()[2]
    return offsets, np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)


def _uint(v: Any, starts: Any, width: int) -> Any:
    """The big-endian unsigned integers of `width` bytes at each of `starts` in `v`."""
    import numpy as np

    raw = v[starts[:, None] + np.arange(width)] if len(starts) else np.zeros((0, width), np.uint8)
    return raw.copy().view(f">u{width}").ravel().astype(np.int64 if width < 8 else np.uint64)


def _gather(data: Any, starts: Any, lengths: Any) -> Any:
    """A binary array of the byte ranges (starts[i], lengths[i]) of `data`."""
    import numpy as np
    import pyarrow as pa

    offsets = np.zeros(len(starts) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return pa.Array.from_buffers(pa.binary(), len(starts),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data[idx].tobytes())])
