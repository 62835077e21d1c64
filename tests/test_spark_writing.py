"""The Spark connector's pure parts, without Spark: rows to bulk calls (a refused row fails
alone), failures counted by reason with the rows' keys, the advice after an abort, and the
lease that tells a stopped streaming query from a running one."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from midtown import errors
from midtown.client import WriteOutcome
from spark_connector.options import Connection, WriteOptions
from spark_connector.source import StreamConflict, abort_advice, claim
from spark_connector.writing import Counts, write_rows

OPTS = WriteOptions(Connection("zk:1"), "d", rows_per_call=8)


def _rows(n: int, bad: set[int]) -> list[dict[str, Any]]:
    return [{"partition_key": f"p{i}", "local_key": "l", "value": "BAD" if i in bad else "v"}
            for i in range(n)]


class Store:
    """A bulk call that refuses the whole call (INVALID_ARGUMENT) when any of its writes
    holds a BAD value, as a coordinator refuses a value over the limit; else applies all."""

    def __init__(self) -> None:
        self.applied: list[bytes] = []
        self.calls = 0

    def send(self, writes: list[Any]) -> list[WriteOutcome]:
        self.calls += 1
        for i, w in enumerate(writes):
            if w.ops[0].value == b"BAD":
                raise errors.InvalidArgument(f"puts.values[{i}]: too big, the limit is 3")
        self.applied += [w.ops[0].partition for w in writes]
        return [WriteOutcome("applied") for _ in writes]


@given(n=st.integers(1, 60), bad=st.sets(st.integers(0, 59), max_size=6))
def test_a_refused_row_fails_alone_and_every_other_row_is_written_once(n: int, bad: set[int]) -> None:
    bad = {b for b in bad if b < n}
    store = Store()
    c = write_rows(OPTS, _rows(n, bad), store.send)
    assert c.rows == n and c.failed == len(bad) and c.applied == n - len(bad)
    assert sorted(store.applied) == sorted(f"p{i}".encode() for i in range(n) if i not in bad)
    assert len(set(store.applied)) == len(store.applied), "no row sent twice once applied"
    if bad:
        (reason, (count, keys)), = c.reasons.items()
        assert count == len(bad) and "the limit is 3" in reason
        assert set(keys) <= {f"p{i}/l" for i in bad} and len(keys) == min(3, len(bad))


def test_failures_are_counted_by_reason_naming_a_few_rows() -> None:
    a, b = Counts(), Counts()
    for i in range(5):
        a.fail("ops[0]: the stored value is not a decimal integer", f"u{i}/n")
    b.fail("event_id: None cannot be a key or an id", "u9/n")
    a.add(b)
    assert a.failed == 6
    text = a.failures()
    assert text.count("not a decimal integer") == 1
    assert "(5 rows: u0/n, u1/n, u2/n and 2 more)" in text and "(1 row: u9/n)" in text


def test_a_key_refused_in_many_rows_is_named_once() -> None:
    """18 increments of one key onto text, then two of others: the key once, with its count
    (it was listed three times, 't029/calls, t029/calls, t029/calls and 15 more')."""
    a, b = Counts(), Counts()
    for _ in range(18):
        a.fail("not a decimal integer", "t029/calls")
    b.fail("not a decimal integer", "t030/calls")
    b.fail("not a decimal integer", "t031/calls")
    b.fail("not a decimal integer", "t032/calls")
    a.add(b)
    assert a.failures() == ("not a decimal integer (21 rows: t029/calls 18 times, t030/calls, t031/calls "
                            "and 1 more)")


def test_abort_advice_fits_the_job() -> None:
    refused = Counts(rows=3, applied=2)
    refused.fail("value: too big", "k/l")
    assert "refuses them again" in abort_advice(refused, with_ids=True)
    assert "each event is applied once" in abort_advice(Counts(rows=3), with_ids=True)
    plain = abort_advice(Counts(rows=3), with_ids=False)
    assert "id_column" in plain and "each event is applied once" not in plain


def test_a_query_id_is_held_by_its_lease() -> None:
    now = 1_000_000
    state = {"owner": "spark-a", "batch": 4, "committed_ms": now - 10_000}
    assert claim(None, "q", "spark-b", now, 60, False) is False, "a new query id"
    assert claim(state, "q", "spark-a", now, 60, False) is True, "its own: replays are skipped"
    with pytest.raises(StreamConflict) as ei:
        claim(state, "q", "spark-b", now, 60, False)
    assert "running copy" in str(ei.value) and "batch 4 10s ago" in str(ei.value)
    assert claim(state, "q", "spark-b", now, 5, False) is False, "lease ran out: stopped"
    assert claim(state, "q", "spark-b", now, 60, True) is False, "taken over on request"
    assert claim({"owner": "old", "batch": 1}, "q", "spark-b", now, 60, False) is False


def test_a_large_shard_is_read_by_several_tasks_by_default() -> None:
    """A shard of 2,000,000 keys of 100-byte values (about 240 MB) was read by one task with
    the old default (512 MB): the default cuts it for at least the two cores of a worker."""
    from spark_connector.options import read_options

    o = read_options({"zk": "h:1", "dataset": "d"})
    assert 240 * 2**20 // o.split_bytes >= 2
    assert read_options({"zk": "h:1", "dataset": "d", "split.sizeInMB": "512"}).split_bytes == 512 * 2**20
