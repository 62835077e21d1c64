"""How processes connect to ZooKeeper (fleet/connect.py): pure parts."""

from __future__ import annotations


def test_a_session_goes_to_a_member_on_its_own_machine_first() -> None:
    """fleet/connect.py local_first: the members whose address this machine holds come
    first (so a machine that goes quiet holds up its own processes' sessions, not others'),
    each group shuffled, the chroot kept."""
    from fleet.connect import local_first

    for _ in range(20):
        got = local_first("203.0.113.5:2181,127.0.0.1:2181,203.0.113.6:2181/midtown")
        head, chroot = got.split("/", 1)
        members = head.split(",")
        assert chroot == "midtown"
        assert members[0] == "127.0.0.1:2181"
        assert sorted(members[1:]) == ["203.0.113.5:2181", "203.0.113.6:2181"]
    orders = {local_first("127.0.0.1:1,127.0.0.2:2,127.0.0.3:3") for _ in range(50)}
    assert len(orders) > 1  # all on this machine: spread over them as kazoo would
