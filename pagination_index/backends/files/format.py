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

A pack (storage.py) is such generations, of several groups, one after another; a group whose
generation is large keeps it in a file of its own, and its pack holds an EXTERNAL pointer: a header
(layout 3, record size 0, count 0) naming the generation.

Every append to a pack ends with the pack's directory, so a reader finds any group with one read
of the pack's tail instead of reading every header from the start (big-endian): magic
b"PIDXDIR1", entry count (u32), per group in the pack (digest (16 bytes: its name's sha256), offset
and length of its last generation (u64 each)), then the CRC-32 of everything before (u32), the
block's length (u32) and b"PIDXDEND". A scan from the start skips directories; only the last one
is read, the others are garbage for a compaction.

Records are sorted by (sort key desc, member desc); member order is byte order, which for UTF-8 is
code point order (DynamoDB's) and for the hex of UUID24 the same as the hex text's.
"""
from __future__ import annotations

import re
import struct
import zlib
from typing import NamedTuple, Sequence

import numpy as np

from pagination_index.sortkeys import micros_sort_key, sort_key_micros

from ..base import Entry

MAGIC = b"PIDXFILE"
VERSION = 1
UUID24, PACKED = 1, 2
# In a pack (storage.py), an entry with no records saying the group's generation lives in a file
# of its own, `<digest>.<generation>`, written in this same format.
EXTERNAL = 3
_FIXED = struct.Struct(">8sHHIQQIH")
_CRC = struct.Struct(">I")
HEADER_READ = 4096  # one read gets any header: group names are far shorter
_HEX32 = re.compile(r"[0-9a-f]{32}")
_KEY = struct.Struct(">q")
_PACKED_HEAD = struct.Struct(">qH")


DIRECTORY_MAGIC, DIRECTORY_END = b"PIDXDIR1", b"PIDXDEND"
_DIRECTORY_HEAD = struct.Struct(">8sI")
_DIRECTORY_ENTRY = struct.Struct(">16sQQ")
DIRECTORY_TAIL = struct.Struct(">II8s")


class CorruptFile(Exception):
    """A generation whose header or records fail their checks."""


class Header(NamedTuple):  # (a tuple: a pack's scan makes one per generation, and a frozen dataclass costs 4x)
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


def sort_uuid_records(records: np.ndarray) -> np.ndarray:
    """UUID24 records in any order into index order, where a member given more than once keeps the
    sort key of its last record in the array. Holds the records and about 40 bytes an entry more:
    replace() comes here only for a stream out of index order or repeating a member, never a
    rebuild's (docs/backends-files.md)."""
    if len(records) > 1:
        # Each run of one member in array order: the last of a run is its latest.
        order = np.lexsort((np.arange(len(records)), records["lo"], records["hi"]))
        high, low = records["hi"][order], records["lo"][order]
        last = np.ones(len(order), dtype=bool)
        last[:-1] = (high[1:] != high[:-1]) | (low[1:] != low[:-1])
        del high, low
        if not last.all():
            records = records[order[last]]
        del order, last
        records = records[np.lexsort((records["lo"], records["hi"], records["k"]))[::-1]]
    return records.astype(UUID_COLUMNS, copy=False)


def uuid_in_order(records: np.ndarray) -> bool:
    """Whether UUID24 records are strictly in index order, each before the next (numpy, no
    per-record Python)."""
    if len(records) < 2:
        return True
    k, high, low = (records[name].astype(native) for name, native in
                    (("k", np.int64), ("hi", np.uint64), ("lo", np.uint64)))
    a, b = slice(None, -1), slice(1, None)
    before = (k[a] > k[b]) | ((k[a] == k[b]) & ((high[a] > high[b]) | ((high[a] == high[b]) & (low[a] > low[b]))))
    return bool(before.all())


def record_before(a, b) -> bool:
    """Whether UUID24 record a comes strictly before record b in index order (newest first, then
    member descending)."""
    return (int(a["k"]), int(a["hi"]), int(a["lo"])) > (int(b["k"]), int(b["hi"]), int(b["lo"]))


# repeated_uuid_members() looks at this many members at a time (16 bytes each, twice at the peak).
REPEAT_PASS = 1_000_000
READ_RECORDS = 50_000


def repeated_uuid_members(read, count: int) -> bool:
    """Whether a member appears twice among `count` UUID24 records, read(first, n) giving n of them
    as an array, holding at most about REPEAT_PASS members at once whatever `count` is: pass p of
    P = ceil(count / REPEAT_PASS) takes the members whose first 8 bytes are p modulo P (a repeated
    member's copies share them, so meet in one pass; uuid4 bits spread the passes evenly)."""
    passes = -(-count // REPEAT_PASS)
    for turn in range(passes):
        high, low = [], []
        for first in range(0, count, READ_RECORDS):
            records = read(first, min(READ_RECORDS, count - first))
            first_half = records["hi"].astype(np.uint64)
            picked = first_half % np.uint64(passes) == turn if passes > 1 else slice(None)
            high.append(first_half[picked])
            low.append(records["lo"][picked].astype(np.uint64))
        high, low = np.concatenate(high), np.concatenate(low)
        order = np.lexsort((low, high))
        high, low = high[order], low[order]
        if ((high[1:] == high[:-1]) & (low[1:] == low[:-1])).any():
            return True
    return False


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


def header_size(group: str) -> int:
    """The header's size in bytes: it depends only on the group's name."""
    return _FIXED.size + len(group.encode()) + _CRC.size


def encode_header(*, group: str, layout: int, record_size: int, count: int, generation: int, records_crc: int) -> bytes:
    name = group.encode()
    fixed = _FIXED.pack(MAGIC, VERSION, layout, record_size, count, generation, records_crc, len(name)) + name
    return fixed + _CRC.pack(zlib.crc32(fixed))


def decode_header(data: bytes) -> Header:
    if len(data) < _FIXED.size:
        raise CorruptFile("not an index file (bad magic)")
    magic, version, layout, record_size, count, generation, records_crc, name_length = _FIXED.unpack_from(data)
    if magic != MAGIC:
        raise CorruptFile("not an index file (bad magic)")
    if version != VERSION:
        raise CorruptFile(f"format version {version}, this code reads {VERSION}")
    end = _FIXED.size + name_length
    if len(data) < end + 4:
        raise CorruptFile("header checksum mismatch (cut short)")
    if _CRC.unpack_from(data, end)[0] != zlib.crc32(memoryview(data)[:end]):
        raise CorruptFile("header checksum mismatch")
    if layout == EXTERNAL and (record_size, count) != (0, 0):
        raise CorruptFile("an external pointer with records")
    if layout not in (UUID24, PACKED, EXTERNAL) or (layout != EXTERNAL and record_size < (24 if layout == UUID24 else 11)):
        raise CorruptFile(f"unknown record layout {layout}/{record_size}")
    return Header(layout, record_size, count, generation, records_crc, bytes(data[_FIXED.size:end]).decode(), end + 4)


def directory_size(count: int) -> int:
    return _DIRECTORY_HEAD.size + count * _DIRECTORY_ENTRY.size + DIRECTORY_TAIL.size


def encode_directory(spans: dict[str, tuple[int, int]]) -> bytes:
    """A pack's directory: `spans` maps each group's digest (32 hex digits) to the offset and length
    of its last generation."""
    body = [_DIRECTORY_HEAD.pack(DIRECTORY_MAGIC, len(spans))]
    body += [_DIRECTORY_ENTRY.pack(bytes.fromhex(digest), offset, length) for digest, (offset, length) in spans.items()]
    block = b"".join(body)
    return block + DIRECTORY_TAIL.pack(zlib.crc32(block), len(block) + DIRECTORY_TAIL.size, DIRECTORY_END)


def directory_length_at_head(head: bytes) -> int | None:
    """The length of the directory starting with `head` (its first bytes, as a scan reads them),
    None when they are too few to say."""
    if len(head) < _DIRECTORY_HEAD.size:
        return None
    return directory_size(_DIRECTORY_HEAD.unpack_from(head)[1])


def directory_length(tail: bytes) -> int | None:
    """The length of the directory ending with `tail` (its last DIRECTORY_TAIL.size bytes or more),
    None when they are not a directory's end."""
    if len(tail) < DIRECTORY_TAIL.size:
        return None
    _, length, end = DIRECTORY_TAIL.unpack_from(tail, len(tail) - DIRECTORY_TAIL.size)
    if end != DIRECTORY_END or (length - directory_size(0)) % _DIRECTORY_ENTRY.size:
        return None
    return length


class Directory:
    """A pack's directory block found at offset `start` of its pack, checked whole (CorruptFile: not
    one, or one failing its checks: a torn or unfinished append). A reader looks up one group
    (find), a writer takes every span (spans)."""

    __slots__ = ("block", "start", "end")

    def __init__(self, block: bytes, start: int):
        length = len(block)
        if length < directory_size(0) or block[:8] != DIRECTORY_MAGIC:
            raise CorruptFile("not a pack directory")
        count = _DIRECTORY_HEAD.unpack_from(block)[1]
        crc, stated, end = DIRECTORY_TAIL.unpack_from(block, length - DIRECTORY_TAIL.size)
        if directory_size(count) != length or stated != length or end != DIRECTORY_END:
            raise CorruptFile("pack directory cut short")
        if crc != zlib.crc32(memoryview(block)[: length - DIRECTORY_TAIL.size]):
            raise CorruptFile("pack directory checksum mismatch")
        self.block, self.start, self.end = block, start, length - DIRECTORY_TAIL.size

    def find(self, digest: str) -> tuple[int, int] | None:
        """(offset, length) of the group's last generation, None when the pack has none."""
        key = bytes.fromhex(digest)
        at = self.block.find(key, _DIRECTORY_HEAD.size, self.end)
        while at >= 0 and (at - _DIRECTORY_HEAD.size) % _DIRECTORY_ENTRY.size:  # (inside another entry's numbers)
            at = self.block.find(key, at + 1, self.end)
        if at < 0:
            return None
        return self._span(*_DIRECTORY_ENTRY.unpack_from(self.block, at)[1:])

    def spans(self) -> dict[str, tuple[int, int]]:
        """Every group's (offset, length), by digest."""
        return {digest.hex(): self._span(offset, length) for digest, offset, length
                in _DIRECTORY_ENTRY.iter_unpack(memoryview(self.block)[_DIRECTORY_HEAD.size: self.end])}

    def _span(self, offset: int, length: int) -> tuple[int, int]:
        if offset + length > self.start:
            raise CorruptFile("pack directory points past itself")
        return offset, length
