"""FileIndex: per group one immutable, sorted generation file plus a write-ahead log of the changes
since, merged on every read; a commit folds the log into the next generation.

Reads take no lock: a generation is published by rename, a log is append-only and a reader uses
only its complete, checksummed records. Writers and committers of a group hold its lock (a
thread lock and flock(2) on the group's `lock` file, so processes and threads alike exclude each
other). See docs/backends-files.md for the format, the commit steps and crash safety.
"""
from __future__ import annotations

import bisect
import contextlib
import fcntl
import itertools
import os
import shutil
import threading
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
from botocore.exceptions import BotoCoreError, ClientError

from pagination_index.sortkeys import micros_sort_key

from ..base import Entry, NetWriteIndex, Removal, newest_first
from . import format as fmt
from . import log as wal
from .s3 import ManifestMoved, S3Storage
from .storage import Generation, GenerationFile, LocalStorage, sync_batch

# replace() reads its entries this many at a time (about 10 MB of Python strings).
REPLACE_CHUNK = 50_000
UUID_RECORD = np.dtype([("k", ">i8"), ("m", "V16")])
# check_integrity reads a generation this many records at a time.
CHECK_CHUNK = 50_000
UUID_COLUMNS = fmt.UUID_COLUMNS


_UNSETTLED = object()  # the stamp of a view read during an append: equal to no stamp


class GroupUnsettled(Exception):
    """A group was published again under every one of a reader's attempts."""


# The files' and S3's own failures: each an IndexUnavailable, through the funnel on every public method.
FAILURES = (OSError, fmt.CorruptFile, GroupUnsettled, ManifestMoved, BotoCoreError, ClientError)


@dataclass(frozen=True)
class GroupView:
    """A consistent state of a group: one generation and its log up to `log_offset`."""

    stamp: object  # the storage's, as the generation was read under it
    base: Generation | None
    log_id: tuple | None  # (inode, size) of the log file as read
    log_offset: int
    log_created_us: int | None
    torn: bool
    overlay: wal.Overlay

    @property
    def generation(self) -> int:
        return self.base.header.generation if self.base else 0

    @property
    def base_count(self) -> int:
        return self.base.header.count if self.base else 0

    def count(self) -> int:
        return self.base_count - len(self.overlay.deleted) + len(self.overlay.inserted)


class FileIndex(NetWriteIndex):
    """OPTIONS: PATH (the folder), COMMIT_ENTRIES (commit a group once its log holds this many
    changes), COMMIT_SECONDS (or once its log is this old, checked on writes and by maintain())."""

    # Sort keys are stored as integers: ISO-8601 timestamps with microseconds (sortkeys.py).
    sort_keys = "iso8601"

    unavailable_errors = FAILURES
    error_label = "files index"
    write_ahead_log = True

    def __init__(self, options: dict | None = None):
        super().__init__(options)
        # Logs and locks always live in local files (on S3, on the host that runs sync_index).
        self.journal = LocalStorage(self.options.get("PATH", "var/pagination-index"))
        if self.options.get("S3_BUCKET"):
            self.storage = S3Storage(self.options)
        else:
            self.storage = self.journal
        self.commit_entries = int(self.options.get("COMMIT_ENTRIES", 1000))
        self.commit_seconds = float(self.options.get("COMMIT_SECONDS", 60))
        self.open_groups = int(self.options.get("OPEN_GROUPS", 512))
        self._views: dict[str, GroupView] = {}
        self._lock = threading.Lock()
        self._group_locks: dict[str, threading.Lock] = {}
        self._pending: set[str] | None = None  # groups with a log, for maintain(); None: not looked yet

    # --- reading a group's state ---------------------------------------------------------------
    def _view(self, group: str) -> GroupView:
        for _ in range(20):
            view = self._try_view(group)
            if view is not None:
                return view
        raise GroupUnsettled(f"group {group!r} kept changing under the reader")

    def _try_view(self, group: str) -> GroupView | None:
        stamp = self.storage.stamp(group)
        cached = self._views.get(group)
        if cached is not None and cached.stamp == stamp:
            base = cached.base
        else:
            cached, base = None, None
            if stamp is not None:
                opened = self.storage.open(group)
                if opened is None or opened.stamp != stamp:
                    return None  # published again between the look and the open
                base = opened.generation
                if not opened.settled:
                    stamp = _UNSETTLED  # read it so, but look again next time
        path = self.journal.log_path(group, base.header.generation if base else 0)
        try:
            status = os.stat(path)
        except FileNotFoundError:
            # No log, or a commit dropped it after publishing a newer generation: look again.
            if stamp is _UNSETTLED:
                # The append under way may be this group's commit, whose header lands without
                # changing the pack's size: look at the pack again instead.
                again = self.storage.open(group)
                if again is None or again.generation is not None and (
                        base is None or again.generation.header.generation != base.header.generation):
                    return None
            elif self.storage.stamp(group) != stamp:
                return None
            view = GroupView(stamp, base, None, 0, None, False, wal.Overlay())
        else:
            log_id = (status.st_ino, status.st_size)
            if cached is not None and cached.log_id == log_id:
                return cached
            if cached is not None and cached.log_id and cached.log_id[0] == status.st_ino:
                start, overlay, created = cached.log_offset, cached.overlay.copy(), cached.log_created_us
            else:
                start, overlay, created = 0, wal.Overlay(), None
            try:
                with open(path, "rb") as log_file:
                    data = log_file.read()
            except FileNotFoundError:  # a commit dropped it since the stat: its generation is newer
                return None
            log_id = (status.st_ino, len(data))
            if start == 0:
                header = wal.decode_header(data)
                if header is None or header[0] != (base.header.generation if base else 0) or header[2] != group:
                    raise fmt.CorruptFile(f"{path}: bad log header")
                created, start = header[1], header[3]
            changes, offset, torn = wal.parse_records(data, start)
            overlay.apply(changes)
            view = GroupView(stamp, base, log_id, offset, created, torn, overlay)
        with self._lock:
            self._views.pop(group, None)
            self._views[group] = view
            while len(self._views) > self.open_groups:  # each view holds its generation open
                self._views.pop(next(iter(self._views)))
        return view

    def _base_entries(self, view: GroupView, first: int, count: int) -> list[Entry]:
        if view.base is None or count <= 0 or first >= view.base_count:
            return []
        count = min(count, view.base_count - first)
        header = view.base.header
        return fmt.decode_records(view.base.read_records(first, count), header.layout, header.record_size)

    def _base_count_newer(self, view: GroupView, sort_key: str, member: str | None) -> int:
        """Binary search of the generation: the records strictly before (sort_key, member)."""
        if view.base is None:
            return 0
        header = view.base.header
        micros = fmt.encode_key(sort_key)
        target = (micros, member.encode()) if member is not None else None
        low, high = 0, header.count
        while low < high:
            middle = (low + high) // 2
            key = fmt.record_order_key(view.base.read_records(middle, 1), 0, header.layout)
            newer = key[0] > micros if target is None else key > target
            if newer:
                low = middle + 1
            else:
                high = middle
        return low

    # --- reads ---------------------------------------------------------------------------------
    def count(self, group: str) -> int:
        return self._view(group).count()

    def count_many(self, groups: Iterable[str]) -> dict[str, int]:
        groups = list(groups)
        if isinstance(self.storage, S3Storage):  # a round trip per manifest: fetch them at once
            self.storage.prefetch(groups)
        return {group: self.count(group) for group in groups}

    def at(self, group: str, rank: int) -> Entry | None:
        view = self._view(group)
        if rank < 0 or rank >= view.count():
            return None
        if not view.overlay:
            return self._base_entries(view, rank, 1)[0]
        entry, position, _ = view.overlay.locate(rank)
        return entry if entry is not None else self._base_entries(view, position, 1)[0]

    def range(self, group: str, start: int, stop: int) -> list[Entry]:
        view = self._view(group)
        start, stop = max(start, 0), min(stop, view.count())
        if start >= stop:
            return []
        if not view.overlay:
            return self._base_entries(view, start, stop - start)
        inserted, ranks, deleted = view.overlay.prepared()
        before = bisect.bisect_left(ranks, start)  # inserted entries ranked before `start`
        position = self._skip_deleted(deleted, start - before)
        base = self._base_entries(view, position, stop - start + len(deleted))
        result, next_inserted, offset = [], before, 0
        for rank in range(start, stop):
            if next_inserted < len(ranks) and ranks[next_inserted] == rank:
                result.append(inserted[next_inserted])
                next_inserted += 1
                continue
            while position + offset in view.overlay.deleted:
                offset += 1
            result.append(base[offset])
            offset += 1
        return result

    @staticmethod
    def _skip_deleted(deleted: list[int], survivor: int) -> int:
        position = survivor
        for gone in deleted:
            if gone <= position:
                position += 1
            else:
                break
        return position

    def count_newer(self, group: str, sort_key: str, member: str | None = None) -> int:
        view = self._view(group)
        base_newer = self._base_count_newer(view, sort_key, member)
        return view.overlay.count_newer(base_newer, sort_key, member) if view.overlay else base_newer

    def groups(self) -> list[str]:
        names = set(self.storage.names()) | set(self.journal.logged_names())
        return sorted(group for group in names if self.count(group) > 0)

    def member_sort_keys(self, group: str, members: Iterable[str]) -> dict[str, str]:
        """The sort key of each of `members` in the group (its log included), for those present: one
        pass over the group's generation (serve_index's ZSCORE, and its ZADD and ZREM replies)."""
        view = self._view(group)
        wanted = set(members)
        found = {member: sort_key for member, (position, sort_key) in self._find_members(view, wanted).items()
                 if position not in view.overlay.deleted}
        for member in wanted & view.overlay.inserted.keys():
            found[member] = view.overlay.inserted[member][0]
        return found

    def pending_changes(self, group: str) -> int:
        """Changes in the group's log not yet committed into a generation (verify_index shows them)."""
        return self._view(group).overlay.pending()

    # --- writes --------------------------------------------------------------------------------
    @contextmanager
    def _locked(self, group: str):
        """The lock of the group's pack (the groups in one pack share it): a thread lock, then flock(2)
        on the pack's lock file. The thread lock is the pack's too, not the group's: on NFS (EFS)
        flock is a POSIX lock, which two threads of one process would both hold."""
        with self._locked_path(self.journal.lock_path(group)):
            yield

    @contextmanager
    def _locked_path(self, path: str):
        with self._lock:
            thread_lock = self._group_locks.setdefault(path, threading.Lock())
        with thread_lock:
            try:
                fd = os.open(path, os.O_RDWR)  # (O_CREAT costs a wait on the file system's journal)
            except FileNotFoundError:
                self.journal.ensure_folder(Path(path).parent)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def _find_members(self, view: GroupView, members: set[str]) -> dict[str, tuple[int, str]]:
        """member -> (position, sort key) of the generation's records of these members: one pass
        over the file (numpy over the mapped records for UUID24)."""
        if view.base is None or not members or view.base_count == 0:
            return {}
        header = view.base.header
        found = {}
        if header.layout == fmt.UUID24:
            wanted = sorted({int(member[:16], 16) for member in members if fmt._HEX32.fullmatch(member)})
            if not wanted:
                return {}
            data = view.base.read_records(0, header.count)
            records = np.frombuffer(data, dtype=UUID_COLUMNS, count=header.count)
            high = records["hi"].astype(np.uint64)
            targets = np.array(wanted, dtype=np.uint64)
            slots = np.searchsorted(targets, high)
            slots[slots == len(targets)] = 0
            for position in np.flatnonzero(targets[slots] == high).tolist():
                member = f"{int(records['hi'][position]):016x}{int(records['lo'][position]):016x}"
                if member in members:
                    found[member] = (position, micros_sort_key(int(records["k"][position])))
            return found
        for position, (member, sort_key) in enumerate(self._base_entries(view, 0, view.base_count)):
            if member in members:
                found[member] = (position, sort_key)
        return found

    def _resolve(self, view: GroupView, adds: Sequence[Entry], removals: Sequence[Removal]) -> list:
        """The net ops of one group as log changes against the view's generation."""
        overlay = view.overlay.copy()
        base = self._find_members(view, {member for member, _ in adds} | {member for member, _ in removals})
        changes = []

        def change(kind, position, member, sort_key):
            changes.append((kind, position, fmt.encode_key(sort_key), member))
            overlay.apply([(kind, position, member, sort_key)])

        def current(member):
            if member in overlay.inserted:
                return overlay.inserted[member][0]
            found = base.get(member)
            if found is not None and found[0] not in overlay.deleted:
                return found[1]
            return None

        def take_out(member):
            if member in overlay.inserted:
                change(wal.UNINSERT, 0, member, overlay.inserted[member][0])
            else:
                position, sort_key = base[member]
                change(wal.DELETE, position, member, sort_key)

        for member, sort_key in removals:
            present = current(member)
            if present is not None and (sort_key is None or sort_key == present):
                take_out(member)
        for member, sort_key in adds:
            present = current(member)
            if present == sort_key:
                continue
            if present is not None:
                take_out(member)
            found = base.get(member)
            if found is not None and found[1] == sort_key:
                change(wal.UNDELETE, found[0], member, sort_key)
            else:
                change(wal.INSERT, self._base_count_newer(view, sort_key, member), member, sort_key)
        return changes

    def _append(self, group: str, view: GroupView, changes: list) -> int:
        """Append one record to the group's log (created, or cut back to its last good record);
        returns the open fd, for the caller to fsync."""
        path = self.journal.log_path(group, view.generation)
        if view.log_id is None:
            temporary = self.journal.log_temporary(group)
            with open(temporary, "wb") as out:
                out.write(wal.encode_header(view.generation, time.time_ns() // 1000, group))
            os.replace(temporary, path)  # made durable with the record, by sync_batch()
        fd = os.open(path, os.O_WRONLY)
        if view.torn:
            os.ftruncate(fd, view.log_offset)
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, wal.encode_record(changes))
        return fd

    def apply_net(self, adds: dict[str, list[Entry]], removes: dict[str, list[Removal]]) -> None:
        for entries in adds.values():
            for member, sort_key in entries:
                fmt.encode_key(sort_key)  # a bad sort key is refused before anything is written
        adds = {group: list(dict(entries).items()) for group, entries in adds.items() if entries}
        groups = sorted(set(adds) | {group for group, removals in removes.items() if removals})
        written, due = [], []
        try:
            for group in groups:
                with self._locked(group):
                    view = self._view(group)
                    changes = self._resolve(view, adds.get(group, []), removes.get(group, []))
                    if not changes:
                        continue
                    written.append((self._append(group, view, changes), self.journal.folder(group)))
                    with self._lock:
                        if self._pending is not None:
                            self._pending.add(group)
                    view = self._view(group)
                    if self._is_due(view):
                        due.append(group)
            self._sync(written)
        finally:
            for fd, _ in written:
                os.close(fd)
        self._commit_due(due)

    def _sync(self, written: list) -> None:
        """Make a batch's log appends durable before apply_net returns (serve_index's
        `appendfsync everysec` syncs once a second instead)."""
        sync_batch(written)

    def _commit_due(self, groups: list[str]) -> None:
        """Commit the groups a write made due, before apply_net returns (serve_index hands them to
        its committer thread, after the reply)."""
        for group in groups:
            self.commit(group)

    def _is_due(self, view: GroupView) -> bool:
        if view.log_id is None:
            return False
        age = time.time() - view.log_created_us / 1e6
        return view.overlay.changes >= self.commit_entries or age >= self.commit_seconds

    def replace(self, group: str, entries: Iterable[Entry]) -> None:
        """Bulk build: the group's next generation, written directly, no log. The table's members
        (uuid hex) are read REPLACE_CHUNK entries at a time into 24-byte records, each chunk sorted
        and appended to the new generation's file at once: a rebuild's stream (newest first, each
        member once) is written as it comes, one chunk in memory whatever the group's size, and the
        group's lock is taken only to publish. The file is then checked for a repeated member a
        pass at a time (fmt.repeated_uuid_members). A stream out of index order or repeating a
        member (never a rebuild's) is read back and sorted by numpy (fmt.sort_uuid_records); any
        other member turns the group into a dict of its texts, as small groups of the tests' have
        (bench/notes/scaling.md)."""
        stream, out, latest = iter(entries), self.journal.temporary(group), None
        try:
            out.reserve_header(group)
            ordered, last = True, None
            while chunk := dict(itertools.islice(stream, REPLACE_CHUNK)):
                if not fmt.uuid_only(chunk):
                    # What was written, in arrival order (a later chunk wins), then the rest.
                    latest = dict(fmt.decode_records(out.records(0, out.count, 24), fmt.UUID24, 24))
                    latest.update(chunk)
                    latest.update(stream)
                    break
                records = fmt.uuid_records(chunk)
                ordered = ordered and (last is None or fmt.record_before(last, records[0]))
                last = records[-1]
                out.write(records.view(np.uint8))
                out.count += len(records)
            if latest is not None:
                layout, size = fmt.layout_for(latest)
                self._publish(group, layout, size, len(latest),
                              [fmt.encode_records(newest_first(latest.items()), layout, size)])
                return

            def read(first: int, count: int) -> np.ndarray:
                return np.frombuffer(out.records(first, count, 24), dtype=UUID_COLUMNS)

            if ordered and not fmt.repeated_uuid_members(read, out.count):
                with self._locked(group):
                    self._swap_in(group, self._view(group), out, fmt.UUID24, 24)
                return
            self.replace_records(group, fmt.sort_uuid_records(read(0, out.count)))
        finally:
            out.discard()

    def replace_records(self, group: str, *parts: np.ndarray) -> None:
        """The bulk path under replace(): UUID24 records (fmt.UUID_COLUMNS) in one or more arrays
        that follow on in index order, each member once, written as the group's next generation
        (bench.scale_bulk loads the seeds' 500 million entries through it)."""
        data = [memoryview(part.view(np.uint8)) for part in parts if len(part)]
        self._publish(group, fmt.UUID24, 24, sum(len(part) for part in parts), data)

    def _publish(self, group: str, layout: int, size: int, count: int, chunks: list, view: GroupView | None = None) -> None:
        """Write records as the group's next generation and publish it; with `view`, the caller
        holds the group's lock and read the view under it (a commit)."""
        if self.storage is self.journal and fmt.header_size(group) + count * size < self.journal.EXTERNAL_BYTES:
            # Small, and local: straight into the group's pack.
            crc = 0
            for chunk in chunks:
                crc = zlib.crc32(chunk, crc)

            def swap(view: GroupView, tidy: bool) -> None:
                generation = view.generation + 1
                self.journal.publish_records(group, fmt.encode_header(
                    group=group, layout=layout, record_size=size, count=count, generation=generation,
                    records_crc=crc), chunks, tidy=tidy)
                self._drop_logs(group, view, tidy)

            if view is not None:
                swap(view, True)
                return
            with self._locked(group):
                swap(self._view(group), False)
            return
        out = self.journal.temporary(group)
        try:
            out.reserve_header(group)
            for chunk in chunks:
                out.write(chunk)
            out.count = count
            if view is not None:
                self._swap_in(group, view, out, layout, size, tidy=True)
                return
            with self._locked(group):
                self._swap_in(group, self._view(group), out, layout, size)
        finally:
            out.discard()

    def _swap_in(self, group: str, view: GroupView, out: GenerationFile, layout: int, size: int,
                 tidy: bool = False) -> None:
        """Make a written generation file generation+1, publish it, then drop the log it folded (the
        pack's lock is held). `tidy` (commits): also what crashes left (_drop_logs, LocalStorage._append)."""
        generation = view.generation + 1
        out.finish(fmt.encode_header(group=group, layout=layout, record_size=size, count=out.count,
                                     generation=generation, records_crc=out.crc))
        if self.storage is self.journal:
            self.storage.publish(group, generation, out, tidy=tidy)
        else:
            self.journal.remove_temporary(group)  # dead writers' leftovers; `out` is locked, so stays
            # The manifest as the view read it is the one arbiter: if another committer published
            # since, this one loses (ManifestMoved) instead of overwriting what it did not merge.
            self.storage.publish(group, generation, out, expected=view.stamp,
                                 previous=view.base.key if view.base else None)
        self.storage.forget(group)  # our own next read looks at the new generation at once
        self._drop_logs(group, view, tidy)

    def _drop_logs(self, group: str, view: GroupView, tidy: bool) -> None:
        """Remove the log of the generation just replaced (folded in already; the lock is held), and
        with `tidy` every log but the new generation's (a crash between a publish and this)."""
        if tidy:
            self.journal.remove_logs(group, keep=view.generation + 1)
        elif view.log_id is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.journal.log_path(group, view.generation))

    # --- commit --------------------------------------------------------------------------------
    def commit(self, group: str) -> bool:
        """Fold the group's log into a new generation; False when there was nothing to fold."""
        with self._locked(group):
            view = self._view(group)
            if view.log_id is None:  # nothing to fold; tidy what a killed committer left
                self.journal.remove_temporary(group)
                self.journal.remove_logs(group, keep=view.generation)
                return False
            layout, size, count, chunks = self._merge(view)
            self._publish(group, layout, size, count, chunks, view)
            return True

    def _merge(self, view: GroupView):
        """(layout, record size, count, record chunks) of the generation plus its log."""
        overlay, header = view.overlay, view.base.header if view.base else None
        inserted, _, deleted = overlay.prepared()
        uuid_only = fmt.uuid_only(overlay.inserted)
        if uuid_only and (header is None or header.layout == fmt.UUID24):
            if view.base is not None:
                data = view.base.read_records(0, header.count)
                records = np.frombuffer(data, dtype=UUID_RECORD, count=header.count)
            else:
                records = np.zeros(0, dtype=UUID_RECORD)
            kept = np.delete(records, deleted) if deleted else records
            positions = [overlay.inserted[member][1] for member, _ in inserted]
            new = np.array([(fmt.encode_key(sort_key), bytes.fromhex(member)) for member, sort_key in inserted],
                           dtype=UUID_RECORD)
            shifted = [position - bisect.bisect_left(deleted, position) for position in positions]
            merged = np.insert(kept, shifted, new) if len(new) else kept
            raw = memoryview(merged.view(np.uint8))  # records as bytes, no copy
            half = (len(merged) // 2) * UUID_RECORD.itemsize
            return fmt.UUID24, 24, len(merged), [raw[:half], raw[half:]]
        entries = [entry for position, entry in enumerate(self._base_entries(view, 0, view.base_count))
                   if position not in overlay.deleted]
        ordered = newest_first(entries + inserted)
        layout, size = fmt.layout_for(member for member, _ in ordered)
        records = fmt.encode_records(ordered, layout, size)
        half = (len(ordered) // 2) * size
        return layout, size, len(ordered), [records[:half], records[half:]]

    def maintain(self, *, rewrites: bool = True) -> int:
        """Commit the groups whose log is due (COMMIT_ENTRIES changes or COMMIT_SECONDS old);
        sync_index calls this after every poll. It looks at the groups this process wrote, and on
        its first call at every group (logs a previous process left). Returns the groups committed."""
        with self._lock:
            if self._pending is None:
                candidates = set(self.journal.logged_names())
                self._pending = set()
            else:
                candidates, self._pending = self._pending, set()
        committed = 0
        for group in sorted(candidates):
            view = self._view(group)
            if view.log_id is None:
                continue
            if self._is_due(view):
                committed += self.commit(group)
            else:
                with self._lock:
                    self._pending.add(group)
        return committed

    def compact_packs(self, share: tuple[int, int] = (0, 1), progress=None) -> int:
        """Rewrite in one piece every pack that takes more disk blocks than its live generations need
        or has no directory (a bulk build or a full rebuild leaves most so, a pack written by an older
        version has none: LocalStorage.needs_compaction), each under its lock;
        `share` (i, n): the i-th of n processes' folders. Returns the packs rewritten."""
        if self.storage is not self.journal:
            return 0
        compacted = 0
        folders = self.journal.folders()[share[0]::share[1]]
        for folder in folders:
            for name in sorted(os.listdir(folder)):
                path = os.path.join(folder, name)
                if name.endswith(".pack") and self.journal.needs_compaction(path):
                    with self._locked_path(path[: -len(".pack")] + ".lock"):
                        if self.journal.needs_compaction(path):
                            self.journal.compact(path)
                            compacted += 1
            if progress:
                progress.advance()
        return compacted

    def check_format(self) -> list[str]:
        """The older layout (a folder per group) still to migrate, and packs a bulk load left in pieces
        or written before packs had directories."""
        if not self.journal.has_layout_marker():
            old = sum(1 for _ in self.old_layout_groups())
            return [f"{old} groups in the older layout (a folder per group): stop sync_index and run "
                    "`manage.py migrate_files_index`"] if old else []
        packs = [path for path in self.journal.root.glob("??/*.pack")]
        loose = sum(self.journal.needs_compaction(str(path)) for path in packs)
        return [f"{loose} of {len(packs)} packs take more disk blocks than their live generations need or have "
                "no directory (a bulk load, a full rebuild or an older version leaves them so): "
                "`manage.py commit_index --compact` rewrites them"] if loose else []

    def old_layout_groups(self) -> Iterator[Path]:
        """The `name` files of the older layout's group folders (PATH/ab/cd/<digest>/, one per group)
        still to upgrade, one top folder's at a time (listed before any is moved): memory follows a
        256th of the groups, not all of them."""
        for top in sorted(self.journal.root.glob("??")):
            yield from sorted(top.glob("??/*/name"))

    def upgrade_group(self, name_file: Path) -> int:
        """Move one group of the older layout into its pack (the same generation: its file appended
        whole, or hard-linked as a file of its own when large) with its log (rewritten with the
        group's name in its header), then remove its folder; returns its entries. Killed midway and
        run again, it appends the same generation again (the last wins)."""
        folder = name_file.parent
        group = name_file.read_bytes().decode()
        self.journal._layout_checked = True  # the older layout is what is being read
        entries = 0
        with self._locked(group):
            data = folder / "data"
            if data.exists():
                with open(data, "rb") as source:
                    header = fmt.decode_header(source.read(fmt.HEADER_READ))
                    entries = header.count
                    if data.stat().st_size >= self.journal.EXTERNAL_BYTES and self.storage is self.journal:
                        own = self.journal.external_path(group, header.generation)
                        own.unlink(missing_ok=True)  # a run killed after linking it
                        os.link(data, own)  # (not rename: killed before the pointer, a rerun finds `data`)
                        self.journal.publish_pointer(group, header.generation)
                    elif self.storage is self.journal:
                        source.seek(0)
                        raw = source.read()
                        self.journal.publish_records(group, raw[: header.data_offset], [raw[header.data_offset:]])
            for log in folder.glob("log.*"):
                suffix = log.name[4:]
                raw = log.read_bytes()
                old = wal.decode_header_v1(raw)
                if not suffix.isdigit() or old is None or old[0] != int(suffix):
                    continue  # a temporary or torn log: nothing was acknowledged from it
                temporary = self.journal.log_temporary(group)
                with open(temporary, "wb") as out:
                    out.write(wal.encode_header(old[0], old[1], group) + raw[old[2]:])
                os.replace(temporary, self.journal.log_path(group, old[0]))
            shutil.rmtree(folder)
        return entries

    def finish_upgrade(self) -> None:
        """The older layout's emptied folders go and the new layout's marker is written."""
        for middle in self.journal.root.glob("??/??"):
            if middle.is_dir():
                shutil.rmtree(middle)  # emptied by upgrade_group: only its leftovers remain
        self.journal.mark_layout()

    def pending_groups(self) -> list[str]:
        return [group for group in self.journal.logged_names() if self._view(group).log_id is not None]

    def clear(self) -> None:
        self.storage.clear()
        self.journal.clear()
        with self._lock:
            self._views.clear()

    def check_integrity(self, group: str) -> list[str]:
        problems = []
        try:
            view = self._view(group)
        except FAILURES as exc:
            return [str(exc)]
        if view.base is not None:
            problems.extend(self._check_generation(view.base))
        if view.torn:
            problems.append(f"log of generation {view.generation}: a torn final record (skipped; "
                            "the next write cuts it off)")
        return problems

    def _check_generation(self, base: Generation) -> list[str]:
        """Checksum, order and distinct members of a generation, read CHECK_CHUNK records at a time
        (verify_index runs this for every group: memory must not follow the largest group's). The
        uuid layout's order is checked by numpy a chunk at a time and its members a pass at a time
        (fmt.repeated_uuid_members, a few more reads of the file); the packed layout (members that
        are not uuids: never a table's) is checked in Python and keeps a set."""
        header, problems = base.header, []
        crc, previous, out_of_order = 0, None, False
        other_members = set()
        for first in range(0, header.count, CHECK_CHUNK):
            data = base.read_records(first, min(CHECK_CHUNK, header.count - first))
            crc = zlib.crc32(data, crc)
            if header.layout == fmt.UUID24:
                records = np.frombuffer(data, dtype=UUID_COLUMNS)
                out_of_order = (out_of_order or not fmt.uuid_in_order(records)
                                or (previous is not None and len(records) and not fmt.record_before(previous, records[0])))
                previous = records[-1] if len(records) else previous
                continue
            for offset in range(0, len(data), header.record_size):
                key = fmt.record_order_key(data, offset, header.layout)
                out_of_order = out_of_order or (previous is not None and previous <= key)
                previous = key
                other_members.add(key[1])
        if crc != header.records_crc:
            problems.append(f"generation {header.generation}: records checksum mismatch")
        if out_of_order:
            problems.append(f"generation {header.generation}: records out of order")
        if header.layout == fmt.UUID24:
            repeated = fmt.repeated_uuid_members(
                lambda first, count: np.frombuffer(base.read_records(first, count), dtype=UUID_COLUMNS), header.count)
        else:
            repeated = len(other_members) != header.count
        if repeated:
            problems.append(f"generation {header.generation}: a member appears twice")
        return problems

    def repair_group(self, group: str) -> None:
        self.replace(group, self.range(group, 0, self.count(group)))

    def close(self) -> None:
        with self._lock:
            self._views.clear()
