"""The write-ahead log of one group: changes on top of one generation, until a commit folds them in.

A log file `<digest>.log.<generation>` starts with a header (b"PIDXLOG2", the generation it applies
to, its creation time in µs, the group's name: length (u16) and UTF-8, a CRC-32) and holds records: payload length (u32), CRC-32 of the payload (u32),
payload. One record per group per batch, so a reader sees a batch whole or not at all. A record cut
short (a crash mid-append) or failing its checksum ends the log: it and anything after it are
skipped, and the next writer truncates it away before appending.

A payload is a run of resolved changes, each relative to the generation's sorted records, so a
reader places them without searching the file by member:

- `I` entry joins the group, at insertion position p (the number of the generation's records before it)
- `X` an entry that joined (I) leaves again
- `D` the generation's record at position p leaves
- `U` that record comes back
"""
from __future__ import annotations

import bisect
import struct
import zlib
from dataclasses import dataclass, field

from pagination_index.sortkeys import micros_sort_key

from ..base import Entry, is_newer

MAGIC = b"PIDXLOG2"
MAGIC_V1 = b"PIDXLOG1"  # the older layout's logs (no name): storage.upgrade() reads them
HEADER = struct.Struct(">8sQqH")
_HEADER_V1 = struct.Struct(">8sQqI")
_CRC = struct.Struct(">I")
RECORD = struct.Struct(">II")
OP = struct.Struct(">cQqH")
INSERT, UNINSERT, DELETE, UNDELETE = b"I", b"X", b"D", b"U"


def encode_header(generation: int, created_us: int, group: str) -> bytes:
    name = group.encode()
    head = HEADER.pack(MAGIC, generation, created_us, len(name)) + name
    return head + _CRC.pack(zlib.crc32(head))


def decode_header(data: bytes) -> tuple[int, int, str, int] | None:
    """(generation, created µs, group, header size), or None for a missing or torn header."""
    if len(data) < HEADER.size or data[:8] != MAGIC:
        return None
    magic, generation, created, length = HEADER.unpack_from(data)
    end = HEADER.size + length
    if len(data) < end + _CRC.size or _CRC.unpack_from(data, end)[0] != zlib.crc32(data[:end]):
        return None
    return generation, created, data[HEADER.size:end].decode(), end + _CRC.size


def decode_header_v1(data: bytes) -> tuple[int, int, int] | None:
    """(generation, created µs, header size) of the older layout's log, or None."""
    if len(data) < _HEADER_V1.size:
        return None
    magic, generation, created, crc = _HEADER_V1.unpack_from(data)
    if magic != MAGIC_V1 or crc != zlib.crc32(data[: _HEADER_V1.size - 4]):
        return None
    return generation, created, _HEADER_V1.size


def encode_record(changes: list[tuple[bytes, int, int, str]]) -> bytes:
    """changes: (kind, position, sort key µs, member)."""
    payload = b"".join(OP.pack(kind, position, micros, len(raw)) + raw
                       for kind, position, micros, raw in ((k, p, m, member.encode()) for k, p, m, member in changes))
    return RECORD.pack(len(payload), zlib.crc32(payload)) + payload


def parse_records(data: bytes, offset: int) -> tuple[list[tuple[bytes, int, str, str]], int, bool]:
    """Complete, valid records from `offset`: (changes as (kind, position, member, sort key), the
    offset after the last good record, whether bytes after it are torn or corrupt)."""
    changes = []
    while offset + RECORD.size <= len(data):
        length, crc = RECORD.unpack_from(data, offset)
        end = offset + RECORD.size + length
        if end > len(data):
            return changes, offset, True
        payload = data[offset + RECORD.size : end]
        if zlib.crc32(payload) != crc:
            return changes, offset, True
        position = 0
        while position < len(payload):
            kind, base_position, micros, size = OP.unpack_from(payload, position)
            position += OP.size
            member = payload[position : position + size].decode()
            position += size
            changes.append((kind, base_position, member, micros_sort_key(micros)))
        offset = end
    return changes, offset, offset < len(data)


@dataclass
class Overlay:
    """What a generation's log has changed so far: the entries that joined (by member, with their
    insertion position) and the generation's records that left (by position)."""

    inserted: dict[str, tuple[str, int]] = field(default_factory=dict)  # member -> (sort key, position)
    deleted: dict[int, Entry] = field(default_factory=dict)  # position -> (member, sort key)
    changes: int = 0
    _prepared: tuple | None = None

    def copy(self) -> "Overlay":
        return Overlay(dict(self.inserted), dict(self.deleted), self.changes)

    def __bool__(self) -> bool:
        return bool(self.inserted or self.deleted)

    def pending(self) -> int:
        return len(self.inserted) + len(self.deleted)

    def apply(self, changes) -> None:
        for kind, position, member, sort_key in changes:
            if kind == INSERT:
                self.inserted[member] = (sort_key, position)
            elif kind == UNINSERT:
                self.inserted.pop(member, None)
            elif kind == DELETE:
                self.deleted[position] = (member, sort_key)
            elif kind == UNDELETE:
                self.deleted.pop(position, None)
            self.changes += 1
        self._prepared = None

    def prepared(self):
        """(inserted entries newest first, their merged ranks, deleted positions ascending)."""
        if self._prepared is None:
            ordered = sorted(((sort_key, member, position) for member, (sort_key, position) in self.inserted.items()),
                             reverse=True)
            deleted = sorted(self.deleted)
            ranks = [position - bisect.bisect_left(deleted, position) + j for j, (_, _, position) in enumerate(ordered)]
            self._prepared = ([(member, sort_key) for sort_key, member, _ in ordered], ranks, deleted)
        return self._prepared

    def locate(self, rank: int) -> tuple[Entry | None, int, int]:
        """Where merged rank `rank` is: (the inserted entry, or None), else the base position of
        the surviving record; and how many inserted entries come before it."""
        inserted, ranks, deleted = self.prepared()
        before = bisect.bisect_left(ranks, rank)
        if before < len(ranks) and ranks[before] == rank:
            return inserted[before], -1, before
        position = rank - before
        for gone in deleted:
            if gone <= position:
                position += 1
            else:
                break
        return None, position, before

    def count_newer(self, base_newer: int, sort_key: str, member: str | None) -> int:
        inserted, _, deleted = self.prepared()
        return (base_newer - bisect.bisect_left(deleted, base_newer)
                + sum(1 for entry in inserted if is_newer(entry, sort_key, member)))
