"""Where generations live: a small interface, so a storage other than local files slots in.

A storage keeps, per group, one published generation (header + records, immutable once written)
and answers reads of byte ranges of it. Publishing is atomic: a reader sees the old generation or
the new one whole, never a half-written file.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
from pathlib import Path
from typing import Iterable, Iterator

from .format import HEADER_READ, CorruptFile, Header, decode_header

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


class LocalStorage:
    """PATH/ab/cd/<32 hex of sha256(group)>/: `data` (the published generation), `name`, and the
    group's log, lock and temporary files. Two levels of 256 folders keep millions of groups out of
    any one folder. Publishing is rename(2) of a fully written, fsynced file over `data`."""

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

    def publish(self, group: str, generation: int, chunks: Iterable[bytes]) -> None:
        """Write a generation to a temporary file, fsync it, rename it over `data`, fsync the folder."""
        self.swap_in(self.write_temporary(group, generation, chunks))

    def write_temporary(self, group: str, generation: int, chunks: Iterable[bytes]) -> Path:
        temporary = self.ensure_group(group) / f"data.{generation}.tmp.{os.getpid()}"
        with open(temporary, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        return temporary

    def swap_in(self, temporary: Path) -> None:
        os.replace(temporary, temporary.parent / "data")
        fsync_dir(temporary.parent)

    def forget(self, group: str) -> None:
        """Nothing cached here: stamp() looks at the file every time."""

    def remove_temporary(self, group: str) -> None:
        """Leftovers of a committer that died (the caller holds the group's lock)."""
        for leftover in self.group_dir(group).glob("data.*.tmp.*"):
            leftover.unlink(missing_ok=True)

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
