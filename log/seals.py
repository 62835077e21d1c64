"""A log's shards as its writer admits them: the rule that nothing of a shard is sequenced
outside its *stint* in the log, from the record that opens the shard here to its hand-off
record (docs/log.md, "Adding logs and handing shards over", step 3). Pure. The writer's
driver (log/driver.py) runs it in the order it sequences appends; a writer that takes the
log over starts from the list the log service keeps for the log
(`/midtown/logs/<log>/seals`, log/zk.py), read once it has fenced the old writer.

An append names each payload's shard (the key-value records; -1 or nothing for the
others) and the shard's *generation* as its sender's shard -> log map has it: the number of
hand-offs the shard has been through (0 for a shard never handed over). A shard's stint in
a log has one generation: the one its open record names (0 for a shard in its first log).
An append that carries a payload of a shard handed away from this log, or of another
generation than the shard's stint here, is refused whole, so nothing of it is sequenced
and its sender may send each record again, by its map read again, under the same request
ids. So a coordinator whose map is older than a hand-off never has a record sequenced in
a stint it does not know: what it computes from the position (a put's version, its
expiry) holds. The hand-off record ends its shard's stint once sequenced; an open record
starts one; both are admitted, unless of an earlier stint than the shard's here (a hand-off
record names the generation it ends: a driver's record delivered late)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.refusals import BadRequest

NONE = -1  # no shard; no log


@dataclass(frozen=True)
class Tags:
    """What the writer needs to know of an append beyond its payloads: each payload's
    shard (NONE: no shard; empty: none named) and that shard's generation as the sender
    knows it (empty: 0 each); and whether it is the hand-off record of shard `seal` to log
    `to`, ending its stint of generation `generation` here, or the record that opens shard
    `open` here at generation `generation`."""
    shards: tuple[int, ...] = ()
    generations: tuple[int, ...] = ()
    seal: int = NONE
    to: int = NONE
    open: int = NONE
    generation: int = 0
    # (An append in the writer's own process, never sent: log/local.py.) Someone waits for
    # the answer of a replica in another process: the followers' lingering Read streams send
    # these entries at once (log/linger.py), as they do an Append call's.
    hurry: bool = False

    def __post_init__(self) -> None:
        if self.seal != NONE and self.open != NONE:
            raise BadRequest("an append seals a shard or opens one, not both", field="open")
        if (self.seal != NONE) != (self.to != NONE):
            raise BadRequest("a hand-off record names the log its shard goes to", field="seal.to")
        if any(s < NONE for s in self.shards):
            raise BadRequest(f"a shard is 0 or more ({NONE}: none)", field="shards")
        if self.generations and len(self.generations) != len(self.shards):
            raise BadRequest(f"{len(self.generations)} generations for {len(self.shards)} shards: name "
                             "one per shard, or none", field="generations")
        if any(g < 0 for g in (*self.generations, self.generation)):
            raise BadRequest("a generation is 0 or more", field="generations")


UNTAGGED = Tags()  # an append that names no shard


@dataclass(frozen=True)
class Stint:
    """A shard's stint in one log: its generation, and once the shard was handed away,
    the log it went to (NONE: its records are admitted here)."""
    generation: int = 0
    to: int = NONE

    @property
    def open(self) -> bool:
        return self.to == NONE


FIRST = Stint()  # a shard this log never sealed nor opened: its first stint, if it is here


class Sealed(Exception):
    """An append refused: it carries a payload of `shard` that this log does not take now."""

    def __init__(self, shard: int, why: str) -> None:
        super().__init__(f"shard {shard} {why}")
        self.shard = shard


class Seals:
    """The stints of the shards of one log (shard -> Stint; absent: FIRST), as its writer
    sequences."""

    def __init__(self, stints: Mapping[int, Stint] | None = None) -> None:
        self.stints: dict[int, Stint] = dict(stints or {})

    def admit(self, tags: Tags) -> None:
        """Admit the next append in the order of the log, or raise Sealed (nothing of it to
        be sequenced). A hand-off or open record is admitted, and takes effect for the
        appends after it, unless it is of an earlier stint than the shard's here: a hand-off
        record of another generation than the shard's stint here, an open record of an
        earlier one (a driver's append delivered late, after the shard came back to this log:
        admitted, it sealed the new stint; make soak, seed 101382)."""
        if tags.seal != NONE:
            st = self.stints.get(tags.seal, FIRST)
            if tags.generation != st.generation:
                raise Sealed(tags.seal, f"is at generation {st.generation} in this log: a hand-off record of "
                                        f"generation {tags.generation} is of an earlier stint")
        if tags.open != NONE:
            st = self.stints.get(tags.open, FIRST)
            if tags.generation < st.generation:
                raise Sealed(tags.open, f"is at generation {st.generation} in this log: an open record of "
                                        f"generation {tags.generation} is of an earlier stint")
        if tags.seal == NONE and tags.open == NONE:
            for i, s in enumerate(tags.shards):
                if s == NONE:
                    continue
                st = self.stints.get(s, FIRST)
                if not st.open:
                    raise Sealed(s, f"was handed over to log {st.to}; send its records there")
                g = tags.generations[i] if tags.generations else 0
                if g != st.generation:
                    raise Sealed(s, f"is at generation {st.generation} in this log, not {g}: the "
                                    "sender's shard -> log map is not the current one; read it again")
        if tags.open != NONE:
            self.stints[tags.open] = Stint(tags.generation)
        if tags.seal != NONE:
            self.stints[tags.seal] = Stint(self.stints.get(tags.seal, FIRST).generation, tags.to)
