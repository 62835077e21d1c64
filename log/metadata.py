"""A log's metadata, kept in ZooKeeper and changed only by versioned (compare-and-set) writes.

A log is a list of segments, one per writer epoch. A segment is open while its writer
appends; the next writer seals it at the end it recovered and opens its own in the same
versioned write. Positions are global: a segment records its first position."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from log import limits


@dataclass(frozen=True, slots=True)
class Segment:
    epoch: int
    first: int
    replicas: tuple[int, ...]
    base_ts: int  # timestamp floor: the last timestamp before this segment
    end: int | None = None  # inclusive last position once sealed (first - 1 when empty)
    last_ts: int | None = None  # timestamp of the entry at `end` (base_ts when empty)

    def __post_init__(self) -> None:
        assert self.epoch >= 1
        assert self.first >= 0
        assert (self.end is None) == (self.last_ts is None)
        if self.end is not None:
            assert self.end >= self.first - 1, "a sealed end is never before the first"

    @property
    def sealed(self) -> bool:
        return self.end is not None


@dataclass(frozen=True, slots=True)
class LogMetadata:
    log_id: int
    epoch: int  # highest writer epoch handed out (by a versioned write)
    segments: tuple[Segment, ...] = ()
    writer: int | None = None  # server that holds `epoch`

    def __post_init__(self) -> None:
        for a, b in zip(self.segments, self.segments[1:]):
            assert a.sealed, "only the last segment may be open"
            assert a.epoch < b.epoch, "segment epochs increase"
            assert a.end is not None and b.first == a.end + 1, "positions are dense"
        if self.segments:
            assert self.segments[-1].epoch <= self.epoch

    @property
    def last_segment(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    def bump(self, writer: int, at_least: int = 0) -> LogMetadata:
        """The next writer's claim: written with the version read, so exactly one wins.
        `at_least` skips past an epoch some replica was seen fenced at."""
        return replace(self, epoch=max(self.epoch + 1, at_least), writer=writer)

    def seal_and_open(
        self, end: int, last_ts: int, new_epoch: int, replicas: tuple[int, ...]
    ) -> LogMetadata:
        """Seal the last segment at the recovered `end` and open the writer's segment."""
        assert new_epoch == self.epoch, "only the holder of the current epoch opens a segment"
        segs = list(self.segments)
        first = limits.FIRST_POSITION
        if segs:
            last = segs[-1]
            assert new_epoch > last.epoch
            if not last.sealed:
                segs[-1] = replace(last, end=end, last_ts=last_ts)
            else:
                assert end == last.end
            first = end + 1
        segs.append(Segment(new_epoch, first, tuple(replicas), base_ts=last_ts))
        return replace(self, segments=tuple(segs))

    def ensemble_changed(self, epoch: int, end: int, last_ts: int,
                         replicas: tuple[int, ...]) -> LogMetadata | None:
        """The writer of `epoch` closes its open segment at `end` (its last acknowledged
        entry, at `last_ts`) and opens the next segment, epoch + 1, on `replicas` (an
        ensemble change: BookKeeper's, for a copy that stopped answering), or None if the
        log has moved on from that writer (another claimed a higher epoch, or its segment
        is no longer the open one): then the change must not be made."""
        last = self.last_segment
        if self.epoch != epoch or last is None or last.sealed or last.epoch != epoch:
            return None
        assert end >= last.first - 1, "an ensemble change never cuts below the segment's first"
        return replace(self, epoch=epoch + 1).seal_and_open(end, last_ts, epoch + 1, replicas)

    def cut(self, end: int, last_ts: int) -> LogMetadata:
        """The log ended at `end` (its entry at `last_ts`) by an operator's fail-over, its
        writer's servers lost (docs/log.md, "A log cut"): the segment holding `end` is sealed
        there, whatever its servers hold past it (kept aside, never read: positions past
        `end` belong to the segments opened after), later segments are dropped, and the
        epoch is raised so that no writer of before can change the metadata again. The next
        writer finds the last segment sealed and opens its own at end + 1."""
        segs = [s for s in self.segments if s.first <= end]
        if not segs:
            first = self.segments[0].first if self.segments else limits.FIRST_POSITION
            if end != first - 1:
                raise ValueError(f"log {self.log_id}: a cut at {end} is below its first position {first}")
            segs = list(self.segments[:1])
        if segs:
            segs[-1] = replace(segs[-1], end=end, last_ts=last_ts)
        return replace(self, epoch=self.epoch + 1, writer=None, segments=tuple(segs))

    def without_segments_below(self, position: int) -> LogMetadata:
        """Drop sealed segments that lie wholly below a truncation point."""
        segs = [s for s in self.segments if not (s.sealed and s.end is not None
                                                  and s.end < position)]
        if not segs and self.segments:
            segs = [self.segments[-1]]
        return replace(self, segments=tuple(segs))

    def segment_of(self, position: int) -> Segment | None:
        """The segment that holds `position` if it is within a segment's range (for the open
        segment, any position at or after its first)."""
        for s in reversed(self.segments):
            if position >= s.first:
                if s.end is not None and position > s.end:
                    return None
                return s
        return None

    # -- JSON codec for ZooKeeper --
    def to_json(self) -> bytes:
        return json.dumps(
            {
                "log_id": self.log_id,
                "epoch": self.epoch,
                "writer": self.writer,
                "segments": [
                    {
                        "epoch": s.epoch,
                        "first": s.first,
                        "replicas": list(s.replicas),
                        "base_ts": s.base_ts,
                        "end": s.end,
                        "last_ts": s.last_ts,
                    }
                    for s in self.segments
                ],
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def from_json(data: bytes) -> LogMetadata:
        d = json.loads(data)
        return LogMetadata(
            log_id=d["log_id"],
            epoch=d["epoch"],
            writer=d.get("writer"),
            segments=tuple(
                Segment(
                    epoch=s["epoch"],
                    first=s["first"],
                    replicas=tuple(s["replicas"]),
                    base_ts=s["base_ts"],
                    end=s["end"],
                    last_ts=s["last_ts"],
                )
                for s in d["segments"]
            ),
        )
