"""Where generations live: a small interface, so a storage other than local files slots in.

A storage keeps, per group, one published generation (header + records, immutable once written)
and answers reads of byte ranges of it. Publishing is atomic: a reader sees the old generation or
the new one whole, never a half-written file.
"""
from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import threading
import time
import zlib
from pathlib import Path
from typing import Iterator

from .format import HEADER_READ, CorruptFile, Header, decode_header, header_size

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


class Generation:
    """One published generation, open for reads (`read` is one pread: a ranged GET on S3)."""

    def __init__(self, fd: int, header: Header, stamp):
        self.fd = fd
        self.header = header
        self.stamp = stamp

    def read_records(self, first: int, count: int) -> bytes:
        size = self.header.record_size
        return os.pread(self.fd, count * size, self.header.data_offset + first * size)

    def __del__(self):  # dropped from every reader's view: nobody can be reading through it
        os.close(self.fd)


class GenerationFile:
    """A generation being written, `<folder>/data.tmp.<random>`: the header's room first, then the
    records as they come (a rebuild streams a group of any size through it, so nothing holds the
    group), then finish() writes the header in that room and fsyncs.

    The writer holds flock(2) on its file from before the file has that name (it is created as
    `data.new.<random>`, locked, then renamed), so a committer of the group (remove_abandoned, under
    the group's lock) removes a `data.tmp.*` it can lock: its writer died. The group's lock is taken
    only to publish: a build of millions of records does not hold up the group's commits or
    sync_index's maintain() meanwhile."""

    # A `data.new.*` left by a writer killed between creating and renaming it (an empty file) goes
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
    def create(cls, folder: Path) -> "GenerationFile":
        name = os.urandom(8).hex()
        fresh, path = folder / f"data.new.{name}", folder / f"data.tmp.{name}"
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
        view = memoryview(records).cast("B")
        self.crc = zlib.crc32(view, self.crc)
        written = 0
        while written < len(view):  # a write(2) may take less than it is given
            written += os.pwrite(self.fd, view[written:], self.size + written)
        self.size += written

    def records(self, first: int, count: int, record_size: int) -> bytes:
        return os.pread(self.fd, count * record_size, self.header_room + first * record_size)

    def finish(self, header: bytes) -> None:
        if len(header) != self.header_room:
            raise ValueError(f"a header of {len(header)} bytes for room of {self.header_room}")
        os.pwrite(self.fd, header, 0)
        os.fsync(self.fd)

    def discard(self) -> None:
        """Close; the file goes unless it was published (renamed away) already."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.path.unlink(missing_ok=True)
        with self._writing_lock:
            self._writing.discard(self.path)

    @classmethod
    def remove_abandoned(cls, folder: Path) -> None:
        now = time.time()
        try:
            # One listing (a bulk build publishes 600,000 groups); `.tmp.` takes the older naming too,
            # data.<n>.tmp.<pid>.
            names = [name for name in os.listdir(folder)
                     if name.startswith("data.new.") or (name.startswith("data.") and ".tmp." in name)]
        except FileNotFoundError:
            return
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
                if not name.startswith("data.new.") or now - os.fstat(fd).st_mtime > cls.GRACE_SECONDS:
                    leftover.unlink(missing_ok=True)
            except BlockingIOError:  # its writer is alive
                pass
            finally:
                os.close(fd)


class LocalStorage:
    """PATH/ab/cd/<32 hex of sha256(group)>/: `data` (the published generation), `name`, and the
    group's log, lock and temporary files. Two levels of 256 folders keep millions of groups out of
    any one folder. Publishing is rename(2) of a fully written, fsynced file over `data`
    (GenerationFile)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def group_dir(self, group: str) -> Path:
        digest = hashlib.sha256(group.encode()).hexdigest()[:32]
        return self.root / digest[:2] / digest[2:4] / digest

    def ensure_group(self, group: str) -> Path:
        folder = self.group_dir(group)
        name = folder / "name"
        if not name.exists():
            folder.mkdir(parents=True, exist_ok=True)
            temporary = folder / f"name.tmp.{os.getpid()}"
            temporary.write_bytes(group.encode())
            os.replace(temporary, name)
        return folder

    def stamp(self, group: str):
        """Identity of the published generation (inode, mtime, size), or None without one."""
        try:
            status = os.stat(self.group_dir(group) / "data")
        except FileNotFoundError:
            return None
        return status.st_ino, status.st_mtime_ns, status.st_size

    def open(self, group: str) -> Generation | None:
        path = self.group_dir(group) / "data"
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            status = os.fstat(fd)
            header = decode_header(os.pread(fd, HEADER_READ, 0))
            if status.st_size != header.data_offset + header.count * header.record_size:
                raise CorruptFile(f"{path}: {status.st_size} bytes, the header says "
                                  f"{header.data_offset + header.count * header.record_size}")
        except BaseException:
            os.close(fd)
            raise
        return Generation(fd, header, (status.st_ino, status.st_mtime_ns, status.st_size))

    def temporary(self, group: str) -> "GenerationFile":
        """A new generation file, written beside the group's `data` (rename stays in one folder)."""
        return GenerationFile.create(self.ensure_group(group))

    def publish(self, group: str, generation: int, written: "GenerationFile") -> None:
        """Rename a finished (fsynced) generation file over `data`, then fsync the folder."""
        os.replace(written.path, written.path.parent / "data")
        fsync_dir(written.path.parent)

    def forget(self, group: str) -> None:
        """Nothing cached here: stamp() looks at the file every time."""

    def remove_temporary(self, group: str) -> None:
        """Leftovers of writers that died (the caller holds the group's lock)."""
        GenerationFile.remove_abandoned(self.group_dir(group))

    def names(self) -> Iterator[str]:
        if not self.root.is_dir():
            return
        for name in sorted(self.root.glob("??/??/*/name")):
            try:
                yield name.read_bytes().decode()
            except FileNotFoundError:  # cleared meanwhile
                continue

    def clear(self) -> None:
        if self.root.is_dir():
            for child in self.root.iterdir():
                if child.is_dir() and len(child.name) == 2:
                    shutil.rmtree(child, ignore_errors=True)
