"""The on-disk format of one group's generation: a header, then fixed-size records, newest first.

Header (big-endian): magic b"PIDXFILE", format version (u16), record layout (u16), record size (u32),
entry count (u64), generation (u64), CRC-32 of the records (u32), group name length (u16), the
group name (UTF-8), then the CRC-32 of everything before it (u32). Records follow at once.

Record layouts, chosen per group at every write of a generation:

- UUID24 (24 bytes): the sort key as signed 64-bit integer microseconds since the epoch, then the
  member as 16 binary bytes. For groups whose every member is 32 lowercase hex digits (a uuid4 hex,
  as the comments table's PK is).
- PACKED (10 + W bytes): the sort key (8 bytes), the member's UTF-8 length (u16), the member padded
  with zero bytes to W, the longest member of the group in bytes. For any other members.

Records are sorted by (sort key desc, member desc); member order is byte order, which for UTF-8 is
code point order (DynamoDB's) and for the hex of UUID24 the same as the hex text's.
"""
from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pagination_index.sortkeys import micros_sort_key, sort_key_micros

from ..base import Entry

MAGIC = b"PIDXFILE"
VERSION = 1
UUID24, PACKED = 1, 2
_FIXED = struct.Struct(">8sHHIQQIH")
_CRC = struct.Struct(">I")
HEADER_READ = 4096  # one read gets any header: group names are far shorter
_HEX32 = re.compile(r"[0-9a-f]{32}")
_KEY = struct.Struct(">q")
_PACKED_HEAD = struct.Struct(">qH")


class CorruptFile(Exception):
    """A generation whose header or records fail their checks."""


@dataclass(frozen=True)
class Header:
    layout: int
    record_size: int
    count: int
    generation: int
    records_crc: int
    group: str
    data_offset: int


def encode_key(sort_key: str) -> int:
    """The sort key as integer microseconds (ValueError unless ISO-8601 UTC with 6 decimals)."""
    micros = sort_key_micros(sort_key)
    if not -(2**63) <= micros < 2**63:
        raise ValueError(f"sort key {sort_key!r} is out of range")
    return micros


def layout_for(members) -> tuple[int, int]:
    """(layout, record size) that holds every member given."""
    width = 0
    uuid_only = True
    for member in members:
        if uuid_only and not _HEX32.fullmatch(member):
            uuid_only = False
        width = max(width, len(member.encode()))
    if uuid_only:
        return UUID24, 24
    if width > 0xFFFF:
        raise ValueError("members longer than 65,535 bytes cannot be stored")
    return PACKED, 10 + max(width, 1)


def encode_records(entries: Sequence[Entry], layout: int, record_size: int) -> bytes:
    """Entries (already in index order) as records."""
    if layout == UUID24:
        return b"".join(_KEY.pack(encode_key(key)) + bytes.fromhex(member) for member, key in entries)
    width = record_size - 10
    out = []
    for member, key in entries:
        raw = member.encode()
        out.append(_PACKED_HEAD.pack(encode_key(key), len(raw)) + raw.ljust(width, b"\0"))
    return b"".join(out)


_SORT_KEY_TEXT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
UUID_COLUMNS = np.dtype([("k", ">i8"), ("hi", ">u8"), ("lo", ">u8")])


def uuid_records(entries: dict[str, str]) -> np.ndarray:
    """Bulk build of UUID24 records (member -> sort key, members all 32 hex digits), sorted into
    index order by numpy: no per-entry Python beyond checking each key's shape."""
    keys = list(entries.values())
    for key in keys:
        if not _SORT_KEY_TEXT.fullmatch(key):
            encode_key(key)  # raises the ValueError saying what is wrong
    try:
        micros = np.array([key[:-1] for key in keys], dtype="datetime64[us]").astype(np.int64)
    except ValueError:  # e.g. February 30th: let the exact parser name it
        for key in keys:
            encode_key(key)
        raise
    members = np.frombuffer(bytes.fromhex("".join(entries)), dtype=">u8").reshape(-1, 2)
    order = np.lexsort((members[:, 1], members[:, 0], micros))[::-1]
    records = np.empty(len(keys), dtype=UUID_COLUMNS)
    records["k"], records["hi"], records["lo"] = micros[order], members[order, 0], members[order, 1]
    return records


def uuid_only(members) -> bool:
    return all(_HEX32.fullmatch(member) for member in members)


def merge_uuid_chunks(chunks: list[np.ndarray]) -> list[np.ndarray]:
    """UUID24 record chunks (each by uuid_records, so each in index order), in the order they were
    given, as chunks that follow on in index order, where a member given more than once keeps its
    last sort key.

    A rebuild gives each member once, newest first (a Query of the product's partition): then the
    chunks are taken as they are, and the peak is the records plus 8 bytes an entry to check that
    no member repeats (a group of 5,000,000: bench.files_index). Repeated members or another order
    cost one array and a full sort: about 60 bytes an entry at the peak, against a few hundred for a
    dict of the entries' texts."""
    if not chunks:
        return []
    if not _shared_high_halves(chunks) and all(_before(a[-1], b[0]) for a, b in zip(chunks, chunks[1:])):
        return chunks
    records = np.concatenate(chunks) if len(chunks) != 1 else chunks[0]
    chunks.clear()
    if len(records) > 1:
        # Each run of one member in arrival order: the last of a run is its latest.
        order = np.lexsort((np.arange(len(records)), records["lo"], records["hi"]))
        high, low = records["hi"][order], records["lo"][order]
        last = np.ones(len(order), dtype=bool)
        last[:-1] = (high[1:] != high[:-1]) | (low[1:] != low[:-1])
        del high, low
        if not last.all():
            records = records[order[last]]
        del order, last
        records = records[np.lexsort((records["lo"], records["hi"], records["k"]))[::-1]]
    return [records.astype(UUID_COLUMNS, copy=False)]  # concatenate() gives native byte order


def _shared_high_halves(chunks: list[np.ndarray]) -> bool:
    """Whether two records' members share their first 8 bytes (every repeated member does)."""
    high = np.concatenate([chunk["hi"].astype(np.uint64) for chunk in chunks])
    high.sort()
    return bool((high[1:] == high[:-1]).any())


def _before(a, b) -> bool:
    """Whether record a comes strictly before record b in index order (newest first, then member
    descending)."""
    return (int(a["k"]), int(a["hi"]), int(a["lo"])) > (int(b["k"]), int(b["hi"]), int(b["lo"]))


def decode_records(data: bytes, layout: int, record_size: int) -> list[Entry]:
    entries = []
    if layout == UUID24:
        for offset in range(0, len(data) - record_size + 1, record_size):
            entries.append((data[offset + 8 : offset + 24].hex(), micros_sort_key(_KEY.unpack_from(data, offset)[0])))
        return entries
    for offset in range(0, len(data) - record_size + 1, record_size):
        micros, length = _PACKED_HEAD.unpack_from(data, offset)
        entries.append((data[offset + 10 : offset + 10 + length].decode(), micros_sort_key(micros)))
    return entries


def record_order_key(data: bytes, offset: int, layout: int) -> tuple[int, bytes]:
    """(micros, member as UTF-8) of one record: index order is this, descending. A UUID24 member
    comes back as its hex text, so it compares with any member of the PACKED layout too."""
    if layout == UUID24:
        return _KEY.unpack_from(data, offset)[0], data[offset + 8 : offset + 24].hex().encode()
    micros, length = _PACKED_HEAD.unpack_from(data, offset)
    return micros, data[offset + 10 : offset + 10 + length]


def entry_order_key(member: str, sort_key: str) -> tuple[int, bytes]:
    return encode_key(sort_key), member.encode()


def encode_header(*, group: str, layout: int, record_size: int, count: int, generation: int, records_crc: int) -> bytes:
    name = group.encode()
    fixed = _FIXED.pack(MAGIC, VERSION, layout, record_size, count, generation, records_crc, len(name)) + name
    return fixed + _CRC.pack(zlib.crc32(fixed))


def decode_header(data: bytes) -> Header:
    if len(data) < _FIXED.size or data[:8] != MAGIC:
        raise CorruptFile("not an index file (bad magic)")
    magic, version, layout, record_size, count, generation, records_crc, name_length = _FIXED.unpack_from(data)
    if version != VERSION:
        raise CorruptFile(f"format version {version}, this code reads {VERSION}")
    end = _FIXED.size + name_length
    if len(data) < end + 4 or _CRC.unpack_from(data, end)[0] != zlib.crc32(data[:end]):
        raise CorruptFile("header checksum mismatch")
    if layout not in (UUID24, PACKED) or record_size < (24 if layout == UUID24 else 11):
        raise CorruptFile(f"unknown record layout {layout}/{record_size}")
    return Header(layout, record_size, count, generation, records_crc, data[_FIXED.size:end].decode(), end + 4)
