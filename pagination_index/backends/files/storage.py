"""Where generations live: a small interface, so a storage other than local files slots in.

A storage keeps, per group, one published generation (header + records, immutable once written)
and answers reads of byte ranges of it. Publishing is atomic: a reader sees the old generation or
the new one whole, never a half-written one (LocalStorage: appended to a pack and taken by readers
once its header is written; S3Storage: an object and its manifest).
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import os
import shutil
import threading
import time
import zlib
from pathlib import Path
from dataclasses import dataclass
from typing import Iterator, NamedTuple

from . import format as fmt, log as wal
from .format import EXTERNAL, HEADER_READ, CorruptFile, Header, decode_header, encode_header, header_size

try:
    _syncfs = ctypes.CDLL(None, use_errno=True).syncfs
except (AttributeError, OSError):  # not Linux
    _syncfs = None


def sync_batch(written: list[tuple[int, Path]]) -> None:
    """Make a batch's log appends durable, with the folders' new entries: one syncfs(2) of the
    file system (one flush for every group the batch touched) on Linux, else an fsync of each
    (log fd, its folder)."""
    if not written:
        return
    if _syncfs is not None:
        if _syncfs(written[0][0]) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))
        return
    for fd, folder in written:
        os.fsync(fd)
        fsync_dir(folder)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pwrite_all(fd: int, data, offset: int) -> int:
    """Write all of `data` at `offset` (a pwrite(2) may take less than it is given); its length."""
    view = memoryview(data).cast("B")
    written = 0
    while written < len(view):
        written += os.pwrite(fd, view[written:], offset + written)
    return written


class Handle:
    """An open file, closed once nothing refers to it (a pack's groups' generations share one)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __del__(self):  # dropped from every reader's view: nobody can be reading through it
        os.close(self.fd)


class Generation:
    """One published generation, open for reads (`read` is one pread: a ranged GET on S3): in a
    pack, at `base`, or a file of its own (base 0)."""

    def __init__(self, handle: Handle, header: Header, base: int = 0):
        self.handle = handle
        self.header = header
        self.base = base

    def read_records(self, first: int, count: int) -> bytes:
        size = self.header.record_size
        return os.pread(self.handle.fd, count * size, self.base + self.header.data_offset + first * size)


class Opened(NamedTuple):
    """What storage.open() found: the storage's stamp it was read under, the group's generation (None:
    none published), and whether the stamp pins it (False while a writer's append is under way, or
    after a crash mid-append: the reader uses it but looks again next time)."""

    stamp: object
    generation: "Generation | None"
    settled: bool = True


class GenerationFile:
    """A generation being written, `<folder>/<stem>.tmp.<random>` (the stem: the group's digest, or
    a pack's for its compaction): the header's room first, then the records as they come (a rebuild
    streams a group of any size through it, so nothing holds the group), then finish() writes the
    header in that room (publish() makes it durable where it goes).

    The writer holds flock(2) on its file from before the file has that name (it is created as
    `<stem>.new.<random>`, locked, then renamed), so a committer in the pack (remove_abandoned, under
    the pack's lock) removes a `*.tmp.*` it can lock: its writer died. The pack's lock is taken
    only to publish: a build of millions of records does not hold up the group's commits or
    sync_index's maintain() meanwhile."""

    # A `*.new.*` left by a writer killed between creating and renaming it (an empty file) goes
    # once this old: younger, its writer may be between open() and flock().
    GRACE_SECONDS = 60
    # This process's own files being written. On NFS (EFS) flock(2) becomes a POSIX lock, which a
    # process never conflicts with itself on: another thread's cleaner would see a live writer's
    # file as free.
    _writing: set[Path] = set()
    _writing_lock = threading.Lock()

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd
        self.header_room = 0
        self.size = 0  # bytes written: where the next records go
        self.count = 0
        self.crc = 0

    @classmethod
    def create(cls, folder: Path, stem: str) -> "GenerationFile":
        name = os.urandom(8).hex()
        fresh, path = folder / f"{stem}.new.{name}", folder / f"{stem}.tmp.{name}"
        fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with cls._writing_lock:
                cls._writing.add(path)
            os.rename(fresh, path)
        except BaseException:
            with cls._writing_lock:
                cls._writing.discard(path)
            os.close(fd)
            fresh.unlink(missing_ok=True)
            raise
        return cls(path, fd)

    def reserve_header(self, group: str) -> None:
        """Room for the header of this group (its size depends only on the name), zero-filled."""
        self.header_room = self.size = header_size(group)
        os.pwrite(self.fd, bytes(self.header_room), 0)

    def write(self, records) -> None:
        """Append records (bytes or a buffer); `count` is the caller's to keep."""
        self.crc = zlib.crc32(records, self.crc)
        self.size += pwrite_all(self.fd, records, self.size)

    def records(self, first: int, count: int, record_size: int) -> bytes:
        return os.pread(self.fd, count * record_size, self.header_room + first * record_size)

    def finish(self, header: bytes) -> None:
        if len(header) != self.header_room:
            raise ValueError(f"a header of {len(header)} bytes for room of {self.header_room}")
        os.pwrite(self.fd, header, 0)

    def pieces(self, size: int = 8 << 20):
        """The records written, a piece of at most `size` bytes at a time."""
        for offset in range(self.header_room, self.size, size):
            yield os.pread(self.fd, min(size, self.size - offset), offset)

    def discard(self) -> None:
        """Close; the file goes unless it was published (renamed away) already."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.path.unlink(missing_ok=True)
        with self._writing_lock:
            self._writing.discard(self.path)

    @classmethod
    def remove_abandoned(cls, folder: Path, prefix: str, listed: list[str] | None = None) -> None:
        """Files of dead writers in `folder` whose names start with `prefix` (a pack's: its groups'
        and its own compactions'); `listed`: the folder's names, listed already."""
        now = time.time()
        try:
            listed = os.listdir(folder) if listed is None else listed
        except FileNotFoundError:
            return
        names = [name for name in listed if name.startswith(prefix) and (".new." in name or ".tmp." in name)]
        with cls._writing_lock:
            names = [name for name in names if folder / name not in cls._writing]
        for name in names:
            leftover = folder / name
            try:
                fd = os.open(leftover, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if ".new." not in name or now - os.fstat(fd).st_mtime > cls.GRACE_SECONDS:
                    leftover.unlink(missing_ok=True)
            except BlockingIOError:  # its writer is alive
                pass
            finally:
                os.close(fd)


class PackEntry(NamedTuple):
    offset: int
    header: Header
    length: int  # header and records


class StaleDirectory(Exception):
    """A pack's directory names a generation that is not whole where it says (an append under way,
    or torn by a crash): the pack is scanned instead."""


@dataclass(frozen=True)
class Pack:
    """A pack file as read: from its last directory (a group's header is read when first asked for),
    or by a scan of its headers from the start (`directory` None: every group's entry)."""

    handle: Handle
    inode: int
    size: int  # the file's size when read; `end` below it: a torn or unfinished append after
    entries: dict[str, PackEntry]  # group -> its last generation: every group's, or those read so far
    end: int
    directory: fmt.Directory | None = None  # the last, when read from it (the pack's last generation ends at its start)

    @property
    def settled(self) -> bool:
        return self.end == self.size

    @property
    def stamp(self) -> tuple[int, int]:
        return self.inode, self.size

    @functools.cached_property
    def spans(self) -> dict[str, tuple[int, int]]:
        """Every group's (offset, length), by digest: what a directory written next lists."""
        if self.directory is not None:
            try:
                return self.directory.spans()
            except CorruptFile as error:
                raise StaleDirectory(str(error))
        return {_digest(group): (entry.offset, entry.length) for group, entry in self.entries.items()}

    @property
    def garbage(self) -> int:
        """Bytes of superseded generations and directories (a compaction drops them)."""
        spans = self.spans
        return self.end - sum(length for _, length in spans.values()) - fmt.directory_size(len(spans))

    def entry(self, group: str) -> PackEntry | None:
        """The group's last generation in the pack (StaleDirectory: the directory cannot say)."""
        found = self.entries.get(group)
        if found is not None or self.directory is None:
            return found
        try:
            span = self.directory.find(_digest(group))
        except CorruptFile as error:
            raise StaleDirectory(str(error))
        if span is None:
            return None
        found = self.entries[group] = self._whole(group, *span)
        return found

    def check_last(self) -> None:
        """StaleDirectory unless the pack's last generation (the one its directory follows) is whole:
        a writer appends after it only then, as every other listed generation was checked by the
        append after it."""
        if self.directory is None:
            return
        for digest, (offset, length) in self.spans.items():
            if offset + length == self.directory.start:
                self._whole(None, offset, length, digest)
                return
        raise StaleDirectory("no generation before the directory")

    def _whole(self, group: str | None, offset: int, length: int, digest: str | None = None) -> PackEntry:
        """The generation at `offset`, of `group` (or of the group with `digest`), checked whole."""
        header = read_header(self.handle.fd, offset, offset + length)
        if (header is None or (header.group != group if digest is None else _digest(header.group) != digest)
                or header.data_offset + header.count * header.record_size != length):
            raise StaleDirectory(group or digest)
        if (offset + length == self.directory.start and length - header.data_offset <= ONE_FLUSH_BYTES
                and not _records_intact(self.handle.fd, offset + header.data_offset, header)):
            raise StaleDirectory(group or digest)  # the pack's last generation, torn by a crash (LocalStorage._append)
        return PackEntry(offset, header, length)


# Records up to this size are appended with their header and one flush, and a read checks the pack's
# last generation against its checksum when it is this small (at most about 40 µs); larger ones are
# flushed before their header is written, so their header on disk says they are whole.
ONE_FLUSH_BYTES = 64 << 10


def _records_intact(fd: int, start: int, header: Header) -> bool:
    crc, end = 0, start + header.count * header.record_size
    for offset in range(start, end, 8 << 20):
        crc = zlib.crc32(os.pread(fd, min(8 << 20, end - offset), offset), crc)
    return crc == header.records_crc


# A read of a header: any group name this shop makes fits (HEADER_READ when not). Reading the pack
# 64 KiB at a time instead, for several headers a read, measured slower (the copy).
HEADER_PEEK = 256
# A reader's first look at a pack reads this much of its end: a directory of up to 127 groups.
TAIL_READ = 4096


def read_header(fd: int, offset: int, limit: int) -> Header | None:
    """The generation header at `offset` of a pack, None when there is none whole before `limit`."""
    data = os.pread(fd, min(HEADER_PEEK, limit - offset), offset)
    try:
        return decode_header(data)
    except CorruptFile:
        if len(data) < HEADER_PEEK:
            return None
    try:  # a long group name
        return decode_header(os.pread(fd, min(HEADER_READ, limit - offset), offset))
    except CorruptFile:
        return None


def read_directory(handle: Handle, inode: int, size: int) -> Pack | None:
    """The pack as its last directory describes it (one read of its tail), None when it does not
    end with a whole directory (an append under way or torn, or a pack written before directories):
    scan_pack() then."""
    if size < fmt.directory_size(0):
        return None
    take = min(TAIL_READ, size)
    data = os.pread(handle.fd, take, size - take)
    length = fmt.directory_length(data)
    if length is None or length > size:
        return None
    block = data[take - length:] if length <= take else os.pread(handle.fd, length, size - length)
    try:
        directory = fmt.Directory(block, size - length)
    except CorruptFile:
        return None
    return Pack(handle, inode, size, {}, size, directory)


def scan_pack(handle: Handle, inode: int, size: int, known: Pack | None = None) -> Pack:
    """Read a pack's generation headers from the start, or on from `known` (a scan of the same
    file: a pack only grows, by whole appends, until a compaction renames a new file over it),
    skipping directories. The scan stops at the first header or directory that fails its checks or
    runs past `size`, and at a last generation whose records fail their checksum
    (LocalStorage._append)."""
    fd = handle.fd
    entries, offset = (dict(known.entries), known.end) if known is not None else ({}, 0)
    last = size  # where the pack's last generation ends: before its directory
    if size >= fmt.DIRECTORY_TAIL.size:
        length = fmt.directory_length(os.pread(fd, fmt.DIRECTORY_TAIL.size, size - fmt.DIRECTORY_TAIL.size))
        if length is not None and length <= size:
            last = size - length
    while offset < size:
        data = os.pread(fd, min(HEADER_PEEK, size - offset), offset)
        if data[:8] == fmt.DIRECTORY_MAGIC:
            length = fmt.directory_length_at_head(data)
            if length is None or offset + length > size:
                break
            if offset + length == size:  # the one a reader reads: whole, or the scan ends before it
                try:
                    fmt.Directory(os.pread(fd, length, offset), offset).spans()
                except CorruptFile:
                    break
            offset += length
            continue
        header = read_header(fd, offset, size)
        if header is None:
            break
        length = header.data_offset + header.count * header.record_size
        if offset + length > size:
            break
        if (offset + length in (size, last) and length - header.data_offset <= ONE_FLUSH_BYTES
                and not _records_intact(fd, offset + header.data_offset, header)):
            break  # the pack's last generation, torn by a crash before its append was flushed
        entries[header.group] = PackEntry(offset, header, length)
        offset += length
    return Pack(handle, inode, size, entries, offset)


LAYOUT_FILE, LAYOUT = "LAYOUT", b"packs 1\n"


@functools.lru_cache(maxsize=65536)  # every read computes it a few times
def _digest(group: str) -> str:
    return hashlib.sha256(group.encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=65536)
def _places(root: str, group: str, bucket_digits: int) -> tuple[str, str, str, str]:
    """(digest, folder, pack, lock) of a group as strings: a read looks at two of them (pathlib's
    joins cost more than the stat)."""
    digest = _digest(group)
    folder = os.path.join(root, digest[:2])
    bucket = os.path.join(folder, digest[:bucket_digits])
    return digest, folder, f"{bucket}.pack", f"{bucket}.lock"


class LocalStorage:
    """PATH/ab/: the groups whose sha256 starts with `ab`, in 256 packs (`abcd.pack`, a group in the
    pack of its digest's first four hex digits: 65,536 packs, however many groups) with their locks
    (`abcd.lock`), the generations of EXTERNAL_BYTES or more that live in files of their own
    (`<digest>.<generation>`), the groups' logs (`<digest>.log.<generation>`) and files being written.

    A pack is generations one after another (format.py), appended under the pack's lock: the records,
    then their header, then one fdatasync (records over ONE_FLUSH_BYTES flushed before their header;
    _append); the last generation of a group wins. Files, not folders,
    per group, and many small generations per file: disk blocks follow the entries, not the groups
    (a folder and a file per group took 12.5 bytes an entry more at 500,000,000 entries in 600,000
    groups; bench/notes/scaling.md). Superseded generations are garbage until a compaction (when they pass a
    quarter of the pack) writes the live ones to a new file renamed over the pack. Readers take no
    lock: a scan stops at the first incomplete generation, so an append under way is invisible."""

    # 65,536 packs: at 600,000 groups about 9 a pack, so a reader's first look at a pack reads 9
    # headers; a pack's file rounds up to 4 KiB, 0.27 bytes an entry at 500,000,000 (4,096 packs:
    # 146 headers, 0.02 bytes).
    BUCKET_DIGITS = 4
    # A generation this big (about 43,000 entries) gets a file of its own: appending it would hold
    # the pack's lock, and a compaction would copy it, for its neighbours' commits.
    EXTERNAL_BYTES = 1 << 20
    COMPACT_MIN_BYTES = 64 << 10  # garbage below this stays (a small pack's few commits)
    OPEN_PACKS = 256

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._root = str(self.root)
        self._packs: dict[str, Pack] = {}  # bucket -> last scan, most recent last
        self._lock = threading.Lock()
        self._layout_checked = False

    # --- where things are ----------------------------------------------------------------------
    @staticmethod
    def digest(group: str) -> str:
        return _digest(group)

    def folder(self, group: str) -> Path:
        return Path(_places(self._root, group, self.BUCKET_DIGITS)[1])

    def bucket(self, group: str) -> str:
        return self.digest(group)[: self.BUCKET_DIGITS]

    def pack_path(self, group: str) -> Path:
        return Path(_places(self._root, group, self.BUCKET_DIGITS)[2])

    def lock_path(self, group: str) -> str:
        """The group's pack's lock: every writer of a group in the pack takes it."""
        return _places(self._root, group, self.BUCKET_DIGITS)[3]

    def log_path(self, group: str, generation: int) -> str:
        digest, folder, _, _ = _places(self._root, group, self.BUCKET_DIGITS)
        return f"{folder}/{digest}.log.{generation}"

    def log_temporary(self, group: str) -> str:
        """Where a log is written before it is renamed to log_path() (this process's)."""
        digest, folder, _, _ = _places(self._root, group, self.BUCKET_DIGITS)
        return f"{folder}/{digest}.logtmp.{os.getpid()}"

    def logs(self, group: str) -> list[str]:
        """The group's log files, whatever their generation (and a killed writer's temporary log)."""
        digest, folder, _, _ = _places(self._root, group, self.BUCKET_DIGITS)
        try:
            return [f"{folder}/{name}" for name in os.listdir(folder) if name.startswith(f"{digest}.log")]
        except FileNotFoundError:
            return []

    def remove_logs(self, group: str, *, keep: int) -> None:
        """Every log file of the group but generation `keep`'s (folded in, or a killed writer's temporary one)."""
        current = self.log_path(group, keep)
        for path in self.logs(group):
            if path != current:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

    def external_path(self, group: str, generation: int) -> Path:
        return self.folder(group) / f"{self.digest(group)}.{generation}"

    def check_layout(self) -> None:
        """Refuse a folder of the older layout (a folder per group, PATH/ab/cd/<digest>/data):
        `manage.py migrate_files_index` converts it."""
        if self._layout_checked:
            return
        if not self.has_layout_marker() and any(self.root.glob("??/??/*/name")):
            raise CorruptFile(f"{self.root} holds the files index's older layout (a folder per group): "
                              "stop sync_index and run `manage.py migrate_files_index` once")
        self._layout_checked = True

    def ensure_group(self, group: str) -> Path:
        """The group's folder, made if need be (and the layout's marker, with the first)."""
        return self.ensure_folder(self.folder(group))

    def ensure_folder(self, folder: Path) -> Path:
        """One of the layout's 256 folders, made if need be (and the layout's marker, with the first)."""
        self.check_layout()
        if not folder.is_dir():
            if not self.has_layout_marker():
                self.mark_layout()
            folder.mkdir(exist_ok=True)
        return folder

    def has_layout_marker(self) -> bool:
        return (self.root / LAYOUT_FILE).exists()

    def folders(self) -> list[Path]:
        """The layout's folders that exist, in order."""
        return sorted(path for path in self.root.glob("??") if path.is_dir())

    def mark_layout(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        temporary = self.root / f"{LAYOUT_FILE}.tmp.{os.getpid()}"
        temporary.write_bytes(LAYOUT)
        os.replace(temporary, self.root / LAYOUT_FILE)
        fsync_dir(self.root)

    # --- reads ---------------------------------------------------------------------------------
    def stamp(self, group: str):
        """Identity of the group's pack as it stands (inode, size), or None without one."""
        self.check_layout()
        try:
            status = os.stat(_places(self._root, group, self.BUCKET_DIGITS)[2])
        except FileNotFoundError:
            return None
        return status.st_ino, status.st_size

    def _pack(self, group: str, fd: int | None = None) -> Pack | None:
        """The group's pack, scanned on from the last scan of the same file (`fd`: the caller's
        open file of it, a writer's)."""
        return self._pack_at(_places(self._root, group, self.BUCKET_DIGITS)[2], fd)

    def _pack_at(self, path: str, fd: int | None = None) -> Pack | None:
        """The pack at `path`: the last read while the file is the same, else its directory (one
        read), else a scan (on from the last scan of the same file)."""
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return None
        else:
            fd = os.dup(fd)
        handle = Handle(fd)
        status = os.fstat(fd)
        inode, size = status.st_ino, status.st_size
        with self._lock:
            known = self._packs.get(path)
        if known is not None and known.inode == inode and known.size == size and known.settled:
            return known
        pack = read_directory(handle, inode, size)
        if pack is None:
            if known is not None and known.inode == inode and known.end <= size and known.directory is None:
                pack = scan_pack(known.handle, inode, size, known)
            else:
                pack = scan_pack(handle, inode, size)
        return self._remember(path, pack)

    def _remember(self, path: str, pack: Pack) -> Pack:
        with self._lock:
            self._packs.pop(path, None)
            self._packs[path] = pack
            while len(self._packs) > self.OPEN_PACKS:
                self._packs.pop(next(iter(self._packs)))
        return pack

    def _entry(self, group: str, pack: Pack, *, writing: bool = False) -> tuple[Pack, PackEntry | None]:
        """The group's entry in `pack`, and the pack it was found in: scanned instead when its
        directory cannot say (Pack.entry), or, `writing` (to append after it), when the pack's last
        generation is not whole."""
        try:
            if writing:
                pack.check_last()
            return pack, pack.entry(group)
        except StaleDirectory:
            path = _places(self._root, group, self.BUCKET_DIGITS)[2]
            pack = self._remember(path, scan_pack(pack.handle, pack.inode, pack.size))
            return pack, pack.entry(group)

    def open(self, group: str) -> Opened | None:
        """The group's published generation; None when it changed while being opened (look again)."""
        pack = self._pack(group)
        if pack is None:
            return Opened(None, None)
        pack, entry = self._entry(group, pack)
        if entry is None:
            return Opened(pack.stamp, None, pack.settled)
        if entry.header.layout != EXTERNAL:
            return Opened(pack.stamp, Generation(pack.handle, entry.header, entry.offset), pack.settled)
        path = self.external_path(group, entry.header.generation)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # a newer generation replaced it meanwhile
            return None
        handle = Handle(fd)
        header = decode_header(os.pread(fd, HEADER_READ, 0))
        size = os.fstat(fd).st_size
        if size != header.data_offset + header.count * header.record_size or header.generation != entry.header.generation:
            raise CorruptFile(f"{path}: {size} bytes and generation {header.generation}; the pack and header "
                              f"say {header.data_offset + header.count * header.record_size} and {entry.header.generation}")
        return Opened(pack.stamp, Generation(handle, header), pack.settled)

    def footprint(self, group: str) -> int:
        """Bytes the group's published generation takes in its pack or its own file."""
        pack = self._pack(group)
        entry = self._entry(group, pack)[1] if pack else None
        if entry is None:
            return 0
        if entry.header.layout == EXTERNAL:
            return entry.length + self.external_path(group, entry.header.generation).stat().st_size
        return entry.length

    # --- writes (the caller holds the pack's lock) ---------------------------------------------
    def temporary(self, group: str) -> GenerationFile:
        """A new generation file, written in the group's folder (rename stays in one folder)."""
        return GenerationFile.create(self.ensure_group(group), self.digest(group))

    def publish(self, group: str, generation: int, written: GenerationFile, *, tidy: bool = True) -> None:
        """Make a finished generation file the group's: a large one renamed to a file of its own with
        a pointer appended to the pack, a small one appended to the pack whole. `tidy`: see _append."""
        if written.size >= self.EXTERNAL_BYTES:
            os.fsync(written.fd)
            os.replace(written.path, self.external_path(group, generation))
            self.publish_pointer(group, generation, tidy=tidy)
        else:
            header = os.pread(written.fd, written.header_room, 0)
            self._append(group, header, written.pieces(), tidy=tidy)

    def publish_pointer(self, group: str, generation: int, *, tidy: bool = True) -> None:
        """Point the group's pack at its generation in a file of its own, written in place already."""
        fsync_dir(self.ensure_group(group))
        pointer = encode_header(group=group, layout=EXTERNAL, record_size=0, count=0,
                                generation=generation, records_crc=0)
        self._append(group, pointer, [], own=generation, tidy=tidy)

    def publish_records(self, group: str, header: bytes, chunks: list, *, tidy: bool = True) -> None:
        """Append a small generation held in memory (header, then its records in `chunks`) to the
        group's pack, with no file of its own on the way (a commit's, a bulk build's)."""
        self._append(group, header, chunks, tidy=tidy)

    def _append(self, group: str, header: bytes, chunks, own: int | None = None, tidy: bool = True) -> None:
        """Append one generation (its header and its records, from `chunks`) to the group's pack,
        with the pack's directory after it: the records and the directory, then the header over the
        zeros before them (a reader on this host sees the generation whole or not at all), then one
        fdatasync. A crash before that flush ends can leave the header on disk and not all the
        records: a read checks the last generation's records against their checksum, so such a one is
        never read and the next append cuts it off. Records over ONE_FLUSH_BYTES (which a read does
        not check) are flushed before their header is written. The group's previous own file goes
        (`own`: the one that stays); with `tidy` (commits), one listing of the folder also removes
        whatever a crash left of the group's and the pack's files (older own files, dead writers'
        files); a bulk build leaves that to the next commit. The pack is compacted once its garbage
        passes a quarter of it."""
        path = self.pack_path(group)
        try:
            fd = os.open(path, os.O_RDWR)  # (O_CREAT costs a wait on the file system's journal)
            created = False
        except FileNotFoundError:
            self.ensure_group(group)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            created = True
        try:
            pack, previous = self._entry(group, self._pack(group, fd), writing=True)
            if pack.end < pack.size:  # an append killed midway: at most one generation's bytes
                if pack.size - pack.end > self.EXTERNAL_BYTES + HEADER_READ:
                    raise CorruptFile(f"{path}: {pack.size - pack.end} bytes after its last whole generation, "
                                      "more than an append leaves: a damaged pack (rebuild_index the groups in it)")
                os.ftruncate(fd, pack.end)
            end = pack.end
            spans = dict(pack.spans)
            if self._append_records(fd, end, header, chunks, spans, self.digest(group)) > ONE_FLUSH_BYTES:
                os.fdatasync(fd)
            os.pwrite(fd, header, end)
            os.fdatasync(fd)
            if created:
                fsync_dir(path.parent)
            pack = self._pack(group, fd)
        finally:
            os.close(fd)
        if previous is not None and previous.header.layout == EXTERNAL and previous.header.generation != own:
            # readers holding it open keep reading it
            self.external_path(group, previous.header.generation).unlink(missing_ok=True)
        if tidy:
            folder, stem = path.parent, f"{self.digest(group)}."
            names = os.listdir(folder)  # (not glob: a pattern per group costs more than the append)
            for name in names:
                suffix = name[len(stem):]
                if name.startswith(stem) and suffix.isdigit() and suffix != str(own):
                    (folder / name).unlink(missing_ok=True)
            GenerationFile.remove_abandoned(folder, self.bucket(group), names)
        if pack.garbage > max(self.COMPACT_MIN_BYTES, (pack.end - pack.garbage) // 4):
            self.compact(str(path))

    @staticmethod
    def _append_records(fd: int, end: int, header: bytes, chunks, spans: dict, digest: str) -> int:
        """Zeros where the header goes (a read stops there until the header is written), the records
        after them, then the pack's directory with the group at `end` (`spans`, updated); returns the
        records' bytes. Records held in memory go in one write with their directory."""
        if isinstance(chunks, list):
            size = sum(memoryview(chunk).nbytes for chunk in chunks)
            spans[digest] = (end, len(header) + size)
            pwrite_all(fd, b"".join([bytes(len(header)), *chunks, fmt.encode_directory(spans)]), end)
            return size
        os.pwrite(fd, bytes(len(header)), end)
        offset = end + len(header)
        for chunk in chunks:
            offset += pwrite_all(fd, chunk, offset)
        spans[digest] = (end, offset - end)
        pwrite_all(fd, fmt.encode_directory(spans), offset)
        return offset - end - len(header)

    def needs_compaction(self, path: str) -> bool:
        """Whether the pack takes more disk blocks than its live generations and directory, rounded
        up to 4 KiB, need (superseded generations and directories: a bulk build leaves up to a group's
        count of directories in each pack; and on ext4 a file appended in more than four pieces among
        other files' appends has an extent block of its own: 5.5 KB more a pack, 0.7 bytes an entry
        at 500,000,000 entries), or has no directory (written before packs had one: its readers scan
        it); compact() rewrites it."""
        pack, blocks = self._directory_of(path)
        try:
            return pack is None or blocks * 512 > -(-(pack.end - pack.garbage) // 4096) * 4096
        except StaleDirectory:  # a directory pointing past itself: a damaged pack, rewritten from a scan
            return True

    def has_directory(self, path: str) -> bool:
        return self._directory_of(path)[0] is not None

    @staticmethod
    def _directory_of(path: str) -> tuple[Pack | None, int]:
        """The pack as its directory has it (None: it has none), and its disk blocks."""
        fd = os.open(path, os.O_RDONLY)
        status = os.fstat(fd)
        return read_directory(Handle(fd), status.st_ino, status.st_size), status.st_blocks

    def compact(self, path: str) -> None:
        """Write the pack's live generations and a directory of them to a new file and rename it over
        the pack (the caller holds the pack's lock). Readers of the old file keep it open until they
        look again."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        handle = Handle(fd)
        pack = scan_pack(handle, 0, os.fstat(fd).st_size)  # (not the directory: a scan checks the last generation)
        folder, name = os.path.split(path)
        out = GenerationFile.create(Path(folder), name.removesuffix(".pack"))
        try:
            spans = {}
            for group, entry in sorted(pack.entries.items(), key=lambda item: item[1].offset):
                spans[self.digest(group)] = (out.size, entry.length)
                for start in range(0, entry.length, 8 << 20):
                    data = os.pread(fd, min(8 << 20, entry.length - start), entry.offset + start)
                    out.size += pwrite_all(out.fd, data, out.size)
            out.size += pwrite_all(out.fd, fmt.encode_directory(spans), out.size)
            os.fsync(out.fd)
            os.replace(out.path, path)
            fsync_dir(out.path.parent)
        finally:
            out.discard()

    def forget(self, group: str) -> None:
        """Nothing to drop: stamp() looks at the pack every time."""

    def remove_temporary(self, group: str) -> None:
        """Leftovers of writers that died, in the group's pack (the caller holds its lock)."""
        GenerationFile.remove_abandoned(self.folder(group), self.bucket(group))

    # --- every group ---------------------------------------------------------------------------
    def names(self) -> Iterator[str]:
        """The groups with a published generation."""
        if not self.root.is_dir():
            return
        self.check_layout()
        names = set()
        for path in self.root.glob("??/*.pack"):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:  # cleared meanwhile
                continue
            handle = Handle(fd)
            names.update(scan_pack(handle, 0, os.fstat(fd).st_size).entries)
        yield from sorted(names)

    def logged_names(self) -> Iterator[str]:
        """The groups with a log (changes not yet committed, or an empty log a commit has not dropped)."""
        if not self.root.is_dir():
            return
        self.check_layout()
        names = set()
        for path in self.root.glob("??/*.log.*"):
            try:
                with open(path, "rb") as log_file:
                    header = wal.decode_header(log_file.read(HEADER_READ))
            except FileNotFoundError:
                continue
            if header is not None:
                names.add(header[2])
        yield from sorted(names)

    def clear(self) -> None:
        if self.root.is_dir():
            for child in self.root.iterdir():
                if child.is_dir() and len(child.name) == 2:
                    shutil.rmtree(child, ignore_errors=True)
        with self._lock:
            self._packs.clear()
