"""Paged shard scans on real processes: pages bounded in items and bytes, every page of a
scan from one view of one replica (the same position, whatever is written meanwhile), a
scan going on from a page's token in another call, splits that cover the shard once, a
partitioning key's items alone, and clear refusals for bad or stale tokens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from midtown import Client, Write, errors
from midtown_pb import kv_pb2 as pb
from tests.integration.conftest import registered, started, wait_for

pytestmark = pytest.mark.integration

SHARDS = 4
KEYS = 2000


@pytest.fixture(scope="module")
def sc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, Client]]:
    with started(tmp_path_factory.mktemp("scans") / "c", shards=SHARDS) as c:
        c.create_dataset("s")
        with Client(c.coordinator_addrs, timeout=30) as db:
            db.write_many("s", [Write.put(f"p{i % 50}", f"l{i:05d}", b"x" * (i % 300)) for i in range(KEYS)])
            yield c, db


def state(db: Client, shard: int) -> dict[tuple[bytes, bytes], bytes]:
    return {(i.partition_key, i.local_key): i.value.value
            for page in db.scan_shard("s", shard, page=10_000) for i in page.items}


def largest(db: Client) -> int:
    """The shard holding the most keys (which shard a key lands in depends on the dataset's
    id, new in every run): over a quarter of them, so more than 300."""
    sizes = {shard: len(state(db, shard)) for shard in range(SHARDS)}
    shard = max(sizes, key=lambda x: sizes[x])
    assert sizes[shard] > 300, sizes
    return shard


def test_pages_are_bounded_and_one_scan_reads_one_position(sc: tuple[object, Client]) -> None:
    _, db = sc
    shard = largest(db)
    before = state(db, shard)
    pages = db.scan_shard("s", shard, page=70, max_bytes=4000)
    first = next(pages)
    # Written while the scan is under way: in the shard, after the scan's position.
    changed = sorted(before)[-5:]
    db.write_many("s", [Write.put(pk, lk, b"new") for pk, lk in changed])
    db.put("s", changed[0][0], b"zz-added-during-the-scan", b"v")
    rest = list(pages)
    got: dict[tuple[bytes, bytes], bytes] = {}
    for p in [first, *rest]:
        assert p.position == first.position
        assert len(p.items) <= 70
        size = sum(len(i.partition_key) + len(i.local_key) + len(i.value.value) for i in p.items)
        assert size <= 4000 + 400 or len(p.items) == 1  # a page stops at the item that passes the bound
        for i in p.items:
            assert (i.partition_key, i.local_key) not in got
            got[(i.partition_key, i.local_key)] = i.value.value
    assert rest[-1].next == b"" and all(p.next for p in [first, *rest[:-1]])
    assert got == before, "the scan's pages all come from the state at its first page's position"
    after = state(db, shard)
    assert after[changed[0]] == b"new" and (changed[0][0], b"zz-added-during-the-scan") in after


def test_a_scan_goes_on_from_a_token_in_another_call(sc: tuple[object, Client]) -> None:
    _, db = sc
    shard = largest(db)
    whole = [(i.partition_key, i.local_key) for page in db.scan_shard("s", shard, page=10_000)
             for i in page.items]
    pages = db.scan_shard("s", shard, page=100)
    first = next(pages)
    pages.close()
    assert first.next
    pk = whole[0][0]
    db.put("s", pk, b"in-between", b"v")  # after the view: not seen by the rest of the scan
    rest = [(i.partition_key, i.local_key) for page in db.scan_shard("s", shard, token=first.next)
            for i in page.items]
    assert [(i.partition_key, i.local_key) for i in first.items] + rest == whole


def test_splits_cover_the_shard_once_at_one_position(sc: tuple[object, Client]) -> None:
    _, db = sc
    shard = largest(db)
    want = state(db, shard)
    whole = db.shard_splits("s", shard, split_bytes=2**40)
    assert len(whole.splits) == 1 and whole.splits[0].keys == len(want)
    plan = db.shard_splits("s", shard, split_bytes=whole.splits[0].bytes // 5)
    assert len(plan.splits) >= 4
    assert sum(s.keys for s in plan.splits) == len(want)
    db.put("s", next(iter(want))[0], b"after-the-plan", b"v")
    got: dict[tuple[bytes, bytes], bytes] = {}
    for s in plan.splits:
        for page in db.scan_shard("s", shard, token=s.token, page=50):
            assert page.position == plan.position
            for i in page.items:
                assert (i.partition_key, i.local_key) not in got
                got[(i.partition_key, i.local_key)] = i.value.value
    assert got == want


def test_a_partitioning_key_alone(sc: tuple[object, Client]) -> None:
    _, db = sc
    for shard in range(SHARDS):
        everything = state(db, shard)
        pks = {pk for pk, _ in everything}
        if not pks:
            continue  # no keys landed in this shard
        for pk in list(pks)[:3]:
            got = {(i.partition_key, i.local_key) for page in db.scan_shard("s", shard, partition_key=pk)
                   for i in page.items}
            assert got == {k for k in everything if k[0] == pk}
        assert [i for page in db.scan_shard("s", shard, partition_key=b"none-such") for i in page.items] == []
        plan = db.shard_splits("s", shard, partition_key=next(iter(pks)))
        assert sum(s.keys for s in plan.splits) == sum(1 for k in everything if k[0] == next(iter(pks)))


def test_bad_and_stale_tokens_are_refused_naming_the_token(sc: tuple[object, Client], tmp_path: Path) -> None:
    c, db = sc
    shard = largest(db)
    with pytest.raises(errors.InvalidArgument, match="token"):
        list(db.scan_shard("s", shard, token=b"\xff\x00 not a token"))
    with pytest.raises(errors.InvalidArgument, match="max_bytes: .* the limit is"):
        list(db.scan_shard("s", shard, max_bytes=2**31))
    first = next(db.scan_shard("s", shard, page=10))
    assert first.next
    with pytest.raises(errors.InvalidArgument, match="token"):
        list(db.scan_shard("s", (shard + 1) % SHARDS, token=first.next))  # another shard's
    forged = pb.ScanCursor()
    forged.ParseFromString(first.next)
    forged.view = b"\x00" * 8
    with pytest.raises(errors.FailedPrecondition, match="token: .*start the scan again"):
        list(db.scan_shard("s", shard, token=forged.SerializeToString()))
    # The node holding the view restarts: the view is gone, and the scan says so.
    node = f"storage-{forged.node}"
    c.kill(node)  # type: ignore[attr-defined]
    c.restart(node)  # type: ignore[attr-defined]
    # Once it serves again (a restart on a loaded machine outlasts the SDK's retries), and
    # is registered as itself: until then the killed process's registration, whose session
    # has not expired, names the same address, and a later test's scan could start there
    # and go on after that session expires (no node 0 among the members: "not serving").
    wait_for(lambda: registered(c, node), 60, f"{node} to serve again")  # type: ignore[arg-type]
    with pytest.raises(errors.FailedPrecondition, match="token: "):
        list(db.scan_shard("s", shard, token=first.next, timeout=30))



def test_arrow_pages_hold_what_item_pages_hold(sc: tuple[object, Client]) -> None:
    """scan_shard(arrow=True): each page's items as one Arrow record batch built by the
    storage node (the Spark data source reads these): the same rows, values, versions and
    expiries, in the same pages, as the item pages of the same view."""
    _, db = sc
    shard = largest(db)
    db.write_many("s", [Write.put(f"p{i}", "ttl-key", b"expiring", ttl_ms=3_600_000) for i in range(50)])
    split = db.shard_splits("s", shard, split_bytes=1 << 30).splits[0].token  # one view for both
    items = list(db.scan_shard("s", shard, page=90, max_bytes=5000, token=split))
    batches = list(db.scan_shard("s", shard, page=90, max_bytes=5000, token=split, arrow=True))
    assert len(items) == len(batches) > 3
    for ip, ap in zip(items, batches):
        assert ap.items == [] and ap.position == ip.position and ap.next == ip.next
        assert ap.arrow.schema.names == ["partition_key", "local_key", "value", "version", "expires_at"]
        rows = list(zip(*(ap.arrow.column(i).to_pylist() for i in range(5))))
        assert rows == [(i.partition_key, i.local_key, i.value.value, i.value.version,
                         i.value.expires_at_ms or None) for i in ip.items]
    assert any(r.value.expires_at_ms for p in items for r in p.items), "expiring keys are compared too"
    with pytest.raises(errors.InvalidArgument, match="arrow"):
        next(db.scan_shard("s", shard, arrow="yes"))  # type: ignore[arg-type]
