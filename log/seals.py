"""A log's sealed shards: the writer's rule that nothing of a shard handed over to another
log is sequenced after the hand-off record (docs/log.md, "Adding logs and handing shards
over", step 3). Pure. The writer driver is to run it in the order it sequences appends,
and a writer that takes the log over to start from the list the log service keeps for the
log (`/midtown/logs/<log>/seals`, log/zk.py); neither is wired yet: no hand-off is made.

An append names each payload's shard (the key-value records; -1 or nothing for the
others). An append that carries a payload of a sealed shard is refused whole, so nothing of
it is sequenced and its sender may send each record again where the shard now lives, under
the same request ids. The hand-off record seals its shard once sequenced; an *open* record
(a shard handed back to this log) unseals it; both are always admitted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.refusals import BadRequest

NONE = -1  # no shard


@dataclass(frozen=True)
class Tags:
    """What the writer needs to know of an append beyond its payloads: each payload's
    shard (NONE: no shard; empty: none named), and whether it is the hand-off record of
    shard `seal` to log `to`, or the record that opens shard `open` here again."""
    shards: tuple[int, ...] = ()
    seal: int = NONE
    to: int = NONE
    open: int = NONE

    def __post_init__(self) -> None:
        if self.seal != NONE and self.open != NONE:
            raise BadRequest("an append seals a shard or opens one, not both", field="open")
        if (self.seal != NONE) != (self.to != NONE):
            raise BadRequest("a hand-off record names the log its shard goes to", field="seal.to")
        if any(s < NONE for s in self.shards):
            raise BadRequest(f"a shard is 0 or more ({NONE}: none)", field="shards")


UNTAGGED = Tags()  # an append that names no shard


class Sealed(Exception):
    """An append refused: it carries a payload of `shard`, which was handed to log `to`."""

    def __init__(self, shard: int, to: int) -> None:
        super().__init__(f"shard {shard} was handed over to log {to}; send its records there")
        self.shard, self.to = shard, to


class Seals:
    """The shards sealed in one log (shard -> the log it went to), as its writer sequences."""

    def __init__(self, sealed: Mapping[int, int] | None = None) -> None:
        self.sealed: dict[int, int] = dict(sealed or {})

    def admit(self, tags: Tags) -> None:
        """Admit the next append in the order of the log, or raise Sealed (nothing of it to
        be sequenced). A hand-off or open record is always admitted, and takes effect for
        the appends after it."""
        if tags.seal == NONE and tags.open == NONE:
            for s in tags.shards:
                if s in self.sealed:
                    raise Sealed(s, self.sealed[s])
        if tags.open != NONE:
            self.sealed.pop(tags.open, None)
        if tags.seal != NONE:
            self.sealed[tags.seal] = tags.to
