"""The files backend's own behaviour: its format, its write-ahead log, commits, and crashes at every
commit step (real SIGKILLs). The contract suite runs on it in test_backends.py."""
from __future__ import annotations

import fcntl
import itertools
import os
import random
import signal
import subprocess
import sys
import time
import uuid
import zlib
from pathlib import Path

import pytest
from django.core.management import call_command

from pagination_index.backends.base import Add, Remove, newest_first
from pagination_index.backends.files import FileIndex
from pagination_index.backends.files import format as fmt
from pagination_index.backends.files import log as wal
from pagination_index.backends.files.storage import GenerationFile, LocalStorage
from pagination_index.testing import sk

ROOT = Path(__file__).resolve().parents[2]


def uuid_member(rng: random.Random) -> str:
    return uuid.UUID(int=rng.getrandbits(128)).hex


def generation_bytes(index: FileIndex, group: str) -> bytes | None:
    """The group's published generation as stored (in its pack, or a file of its own), or None."""
    generation = index.storage.open(group).generation
    if generation is None:
        return None
    header = generation.header
    return os.pread(generation.handle.fd, header.data_offset + header.count * header.record_size, generation.base)


def same_pack(index: FileIndex, group: str) -> str:
    """Another group whose generations go to the same pack as `group`'s."""
    return next(f"n{n}" for n in itertools.count() if index.storage.bucket(f"n{n}") == index.storage.bucket(group))


def log_files(index: FileIndex, group: str) -> list[Path]:
    return sorted(Path(path) for path in index.storage.logs(group) if ".log." in Path(path).name)


@pytest.fixture
def index(tmp_path):
    return FileIndex({"PATH": tmp_path / "index", "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 10**9})


def test_uuid_members_take_24_bytes_per_entry_and_count_is_in_the_header(index):
    rng = random.Random(1)
    entries = [(uuid_member(rng), sk(rng.randrange(10**6))) for _ in range(1000)]
    index.replace("g", entries)
    raw = generation_bytes(index, "g")
    header = fmt.decode_header(raw)
    assert (header.layout, header.record_size, header.count, header.generation) == (fmt.UUID24, 24, 1000, 1)
    assert len(raw) == header.data_offset + 24 * 1000
    assert index.range("g", 0, 1000) == newest_first(entries)


def test_other_members_take_the_packed_layout_sized_by_the_longest(index):
    index.replace("g", [("a", sk(1)), ("Café-茶", sk(2)), ("0123456789abcdef0123456789abcdef", sk(3))])
    header = fmt.decode_header(generation_bytes(index, "g"))
    assert (header.layout, header.record_size) == (fmt.PACKED, 10 + 32)  # the hex member is the longest
    assert index.at("g", 1) == ("Café-茶", sk(2))


def test_replace_reads_uuid_entries_a_chunk_at_a_time_and_the_last_of_a_member_wins(index, monkeypatch):
    """Across chunks, in any order: a member given again keeps its last sort key (as a dict would);
    a non-uuid member late in the stream still takes the whole group to the packed layout."""
    monkeypatch.setattr("pagination_index.backends.files.index.REPLACE_CHUNK", 100)
    rng = random.Random(7)
    members = [uuid_member(rng) for _ in range(1000)]
    given = [(rng.choice(members), sk(rng.randrange(10**6))) for _ in range(3000)]  # ~95 % repeats
    model = dict(given)
    index.replace("g", iter(given))
    header = fmt.decode_header(generation_bytes(index, "g"))
    assert (header.layout, header.count) == (fmt.UUID24, len(model))
    assert index.range("g", 0, len(model)) == newest_first(model.items())

    late = [*given[:250], ("not-a-uuid", sk(5)), *given[250:400]]
    index.replace("g", iter(late))
    header = fmt.decode_header(generation_bytes(index, "g"))
    assert header.layout == fmt.PACKED
    assert index.range("g", 0, 10_000) == newest_first(dict(late).items())
    index.replace("g", iter(()))
    assert index.count("g") == 0


def test_a_stream_already_in_index_order_is_taken_as_it_comes_and_any_slip_is_sorted(index, monkeypatch):
    """A rebuild's stream (newest first, equal keys by member descending) is written as its chunks
    came, never held whole; chunks out of order are read back and sorted."""
    monkeypatch.setattr("pagination_index.backends.files.index.REPLACE_CHUNK", 64)
    sorted_whole, sort = [], fmt.sort_uuid_records

    def counted_sort(records):
        sorted_whole.append(len(records))
        return sort(records)

    monkeypatch.setattr(fmt, "sort_uuid_records", counted_sort)
    rng = random.Random(8)
    ordered = newest_first([(uuid_member(rng), sk(rng.randrange(300))) for _ in range(700)])  # many equal keys
    index.replace("g", iter(ordered))
    assert index.range("g", 0, 700) == ordered and sorted_whole == []
    assert index.check_integrity("g") == []
    index.replace("g", iter([*ordered[:100], ordered[150], *ordered[100:150], *ordered[151:]]))
    assert index.range("g", 0, 700) == ordered and sorted_whole == [700]
    assert index.check_integrity("g") == []


@pytest.mark.parametrize("count, passes", [(0, 0), (1, 1), (999, 1), (1000, 1), (1001, 2), (5000, 5)])
def test_a_repeated_member_is_found_in_passes_whatever_its_place(monkeypatch, count, passes):
    """repeated_uuid_members() holds REPEAT_PASS members at a time: a repeat is found across passes'
    boundaries and read chunks alike, and a group with none is clean."""
    monkeypatch.setattr(fmt, "REPEAT_PASS", 1000)
    monkeypatch.setattr(fmt, "READ_RECORDS", 300)
    rng = random.Random(count)
    records = fmt.uuid_records({uuid_member(rng): sk(n) for n in range(count)})
    reads = []

    def read(first, n):
        reads.append(first)
        return records[first:first + n]

    assert not fmt.repeated_uuid_members(read, count)
    assert reads.count(0) == passes
    if count > 1:
        for place in (0, count // 2, count - 1):
            copy = records.copy()
            copy[place]["hi"], copy[place]["lo"] = copy[(place + 1) % count]["hi"], copy[(place + 1) % count]["lo"]
            assert fmt.repeated_uuid_members(lambda first, n: copy[first:first + n], count), place
        twins = records.copy()
        twins["hi"] = 7  # every first half shared: the second halves decide
        assert not fmt.repeated_uuid_members(lambda first, n: twins[first:first + n], count)


def test_a_uuid_group_that_gets_another_member_changes_layout_at_commit(index):
    member = uuid.uuid4().hex
    index.replace("g", [(member, sk(1))])
    index.add_many("g", [("not-a-uuid", sk(2))])
    assert index.commit("g")
    assert fmt.decode_header(generation_bytes(index, "g")).layout == fmt.PACKED
    assert index.range("g", 0, 5) == [("not-a-uuid", sk(2)), (member, sk(1))]


@pytest.mark.parametrize("commit_entries", [5, 40, 10**9])
def test_uuid_groups_match_a_sorted_list_through_writes_and_commits(tmp_path, commit_entries):
    """The numpy merge and member lookup of UUID24 files, with conditional removes and moves."""
    index = FileIndex({"PATH": tmp_path / "i", "COMMIT_ENTRIES": commit_entries, "COMMIT_SECONDS": 10**9})
    rng = random.Random(commit_entries)
    pool = [uuid_member(rng) for _ in range(80)]
    model: dict[str, str] = {}
    index.replace("g", [(member, sk(rng.randrange(30))) for member in pool[:40]])
    model.update(index.range("g", 0, 100))
    for step in range(400):
        member = rng.choice(pool)
        roll = rng.random()
        if roll < 0.55:
            model[member] = sk(rng.randrange(30))
            index.apply([Add("g", member, model[member])])
        elif roll < 0.8 and member in model:
            guess = model[member] if rng.random() < 0.5 else sk(rng.randrange(30))
            if guess == model[member]:
                del model[member]
            index.apply([Remove("g", member, guess)])
        else:
            model.pop(member, None)
            index.remove_many("g", [member])
        if step % 37 == 0:
            expected = newest_first(model.items())
            assert index.range("g", 0, 200) == expected
            assert [index.at("g", rank) for rank in range(len(expected))] == expected
            assert FileIndex(index.options).range("g", 3, 17) == expected[3:17]  # another process's view
    expected = newest_first(model.items())
    assert index.count("g") == len(expected) and index.range("g", 0, 200) == expected
    for sort_key, member in [(sk(10), None), (sk(10), pool[3]), (sk(0), "")]:
        assert index.count_newer("g", sort_key, member) == sum(
            1 for m, s in expected if (s > sort_key if member is None else (s, m) > (sort_key, member)))
    index.commit("g")
    assert index.check_integrity("g") == [] and index.range("g", 0, 200) == expected


def test_a_torn_final_log_record_is_skipped_and_costs_no_earlier_record(index):
    index.add_many("g", [("a", sk(1))])
    index.add_many("g", [("b", sk(2))])
    index.add_many("g", [("c", sk(3))])
    (log,) = log_files(index, "g")
    raw = log.read_bytes()
    log.write_bytes(raw[:-3])  # the last record cut mid-way, as a crash mid-append leaves it
    reader = FileIndex(index.options)
    assert reader.range("g", 0, 10) == [("b", sk(2)), ("a", sk(1))]
    assert any("torn" in problem for problem in reader.check_integrity("g"))
    reader.add_many("g", [("d", sk(4))])  # the next write cuts the torn record off first
    assert FileIndex(index.options).range("g", 0, 10) == [("d", sk(4)), ("b", sk(2)), ("a", sk(1))]
    assert reader.check_integrity("g") == []


def test_a_corrupt_log_record_ends_the_log(index):
    index.add_many("g", [("a", sk(1))])
    index.add_many("g", [("b", sk(2))])
    (log,) = log_files(index, "g")
    raw = bytearray(log.read_bytes())
    raw[-1] ^= 0xFF
    log.write_bytes(bytes(raw))
    assert FileIndex(index.options).range("g", 0, 10) == [("a", sk(1))]


def test_a_log_passing_commit_entries_is_committed_and_dropped(tmp_path):
    index = FileIndex({"PATH": tmp_path / "i", "COMMIT_ENTRIES": 10, "COMMIT_SECONDS": 10**9})
    index.add_many("g", [(f"m{n}", sk(n)) for n in range(9)])
    assert index.pending_changes("g") == 9 and generation_bytes(index, "g") is None
    index.add_many("g", [("m9", sk(9))])
    assert fmt.decode_header(generation_bytes(index, "g")).generation == 1
    assert log_files(index, "g") == [] and index.pending_changes("g") == 0
    assert index.count("g") == 10


def test_maintain_commits_logs_older_than_commit_seconds(tmp_path):
    index = FileIndex({"PATH": tmp_path / "i", "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 0.3})
    index.add_many("g", [("a", sk(1))])
    index.add_many("h", [("b", sk(1))])
    assert index.maintain() == 0
    time.sleep(0.4)
    assert index.maintain() == 2
    assert index.pending_changes("g") == 0 and index.range("g", 0, 5) == [("a", sk(1))]
    assert FileIndex(index.options).maintain() == 0  # a fresh process looks at every group once


def test_groups_share_packs_in_256_folders_and_no_group_has_a_folder_or_file_of_its_own(index):
    """Disk blocks follow the entries, not the groups: small groups' generations share a pack file
    (65,536 packs however many groups), in 256 folders."""
    groups = [f"SKU-{n}/5" for n in range(200)]
    groups += [same_pack(index, groups[0]), next(f"m{n}" for n in itertools.count()
                                                 if index.storage.bucket(f"m{n}") == index.storage.bucket(groups[0]))]
    index.apply([Add(group, uuid.uuid4().hex, sk(1)) for group in groups])
    for group in groups:
        index.commit(group)
    root = index.storage.root
    folders = [path for path in root.iterdir() if path.is_dir()]
    assert all(len(folder.name) == 2 for folder in folders) and len(folders) <= 256
    files = [path for folder in folders for path in folder.iterdir()]
    assert {path.suffix for path in files} == {".pack", ".lock"}  # logs folded, no temporaries left
    packs = [path for path in files if path.suffix == ".pack"]
    assert len(packs) < len(groups)
    assert all(len(path.stem) == 4 and path.stem.startswith(path.parent.name) for path in packs)
    with open(index.storage.pack_path(groups[0]), "rb") as pack:
        assert pack.read().count(b"PIDXFILE") == 3  # three groups' generations, one after another
    assert index.groups() == sorted(groups)
    assert index.storage.pack_path(groups[0]).parent.parent == root


def test_commit_index_command(index, settings):
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": "pagination_index.backends.files.FileIndex", "OPTIONS": index.options})
    index.add_many("g", [("a", sk(1))])
    index.add_many("h", [("b", sk(1))])
    call_command("commit_index", group=["g"], verbosity=0)
    assert index.pending_changes("g") == 0 and index.pending_changes("h") == 1
    call_command("commit_index", verbosity=0)
    assert index.pending_changes("h") == 0 and index.groups() == ["g", "h"]


# --- crashes: SIGKILL a committer at each step ------------------------------------------------------
COMMITTER = """
import sys
from tests.pagination_index.test_files_index import PausingFileIndex, crash_batch
from tests.config import index_config
index = PausingFileIndex({"PATH": sys.argv[1], "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 10**9},
                         step=sys.argv[2], marker=sys.argv[3])
index.apply(crash_batch(index))
index.commit("big")
"""


def pause_for_the_kill(marker: str) -> None:
    Path(marker).write_text(str(os.getpid()))
    while True:
        time.sleep(1)


class PausingStorage(LocalStorage):
    """A committer's storage that stops at one step of publishing, for the test to kill it there."""

    def __init__(self, root, step: str, marker: str):
        super().__init__(root)
        self.step, self.marker = step, marker

    def pause(self, step: str) -> None:
        if step == self.step:
            pause_for_the_kill(self.marker)

    def temporary(self, group):
        storage = self

        class Pausing(GenerationFile):
            writes = 0

            def write(self, records):
                if self.writes == 1:
                    storage.pause("mid-merge")  # the first half of the records is written
                self.writes += 1
                super().write(records)

            def finish(self, header):
                super().finish(header)
                storage.pause("written")

        plain = super().temporary(group)
        return Pausing(plain.path, plain.fd)

    def _append_records(self, fd, end, header, chunks, spans, digest):
        written = super()._append_records(fd, end, header, chunks, spans, digest)
        self.pause("records-appended")  # in the pack with its directory, its header not yet written
        return written

    def publish(self, group, generation, written, **options):
        super().publish(group, generation, written, **options)
        self.pause("published")

    def publish_records(self, group, header, chunks, **options):
        super().publish_records(group, header, chunks, **options)
        self.pause("published")


class PausingFileIndex(FileIndex):
    def __init__(self, options, *, step: str, marker: str):
        super().__init__(options)
        self.step, self.marker = step, marker
        self.storage = self.journal = PausingStorage(self.journal.root, step, marker)

    def _drop_logs(self, group, view, tidy):
        if self.step == "before-drop":
            pause_for_the_kill(self.marker)
        super()._drop_logs(group, view, tidy)


def crash_batch(index: FileIndex) -> list:
    """Changes to the big group: new entries, removals of existing ones, moves."""
    rng = random.Random(5)
    existing = index.range("big", 0, 2000)
    ops = [Add("big", uuid_member(rng), sk(rng.randrange(10**6))) for _ in range(300)]
    ops += [Remove("big", member, sort_key) for member, sort_key in existing[::7]]
    ops += [Add("big", member, sk(rng.randrange(10**6))) for member, _ in existing[3::11]]
    return ops


def expected_after(entries: list, ops: list) -> list:
    model = dict(entries)
    for op in ops:
        if isinstance(op, Add):
            model[op.member] = op.sort_key
        elif model.get(op.member) == op.sort_key:
            del model[op.member]
    return newest_first(model.items())


@pytest.mark.parametrize(("step", "size"), [
    # A large group: its generation written to a file of its own, renamed, pointed at from its pack.
    *((step, 100_000) for step in ["mid-merge", "written", "records-appended", "published", "before-drop"]),
    # A small one: appended to its pack from memory.
    *((step, 5_000) for step in ["records-appended", "published", "before-drop"])])
def test_a_committer_killed_at_each_step_leaves_reads_correct(tmp_path, step, size):
    rng = random.Random(3)
    path = tmp_path / "index"
    index = FileIndex({"PATH": path, "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 10**9})
    entries = [(uuid_member(rng), sk(rng.randrange(10**6))) for _ in range(size)]
    index.replace("big", entries)
    batch = crash_batch(index)  # what the committer applies first: the same ops from the same state
    expected = expected_after(entries, batch)
    marker = tmp_path / "paused"
    env = dict(os.environ, PYTHONPATH=str(ROOT), DJANGO_SETTINGS_MODULE="tests.settings")
    committer = subprocess.Popen([sys.executable, "-c", COMMITTER, str(path), step, str(marker)], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert committer.poll() is None, "the committer exited before reaching its step"
            assert time.monotonic() < deadline, f"the committer never reached {step}"
            time.sleep(0.05)
        reader = FileIndex(index.options)
        assert reader.count("big") == len(expected)  # while it is paused there
        committer.send_signal(signal.SIGKILL)
        committer.wait()
    finally:
        if committer.poll() is None:
            committer.kill()
            committer.wait()
    after = FileIndex(index.options)  # "after a restart"
    assert after.count("big") == len(expected)
    for rank in (0, 1, 777, len(expected) // 2, len(expected) - 1):
        assert after.at("big", rank) == expected[rank], rank
    assert after.range("big", 0, 3000) == expected[:3000]
    # Catch-up: the stream replays the batch (its checkpoint had not moved); then commit.
    after.apply(batch)
    after.commit("big")
    assert after.range("big", 0, len(expected) + 1) == expected
    assert after.check_integrity("big") == []
    # Left: the layout's marker, the pack and its lock, and (a large group) its own file of the last
    # generation; no temporary file, log or older generation.
    digest, generation = after.storage.digest("big"), after.storage.open("big").generation.header.generation
    own = [f"{digest[:2]}/{digest}.{generation}"] if size > 50_000 else []
    assert sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()) == sorted(
        ["LAYOUT", f"{digest[:2]}/{digest[:4]}.lock", f"{digest[:2]}/{digest[:4]}.pack", *own])


def test_log_records_decode_what_was_encoded():
    changes = [(wal.INSERT, 5, 1629896400123456, "ü"), (wal.DELETE, 0, -1, "x")]
    record = wal.encode_record(changes)
    parsed, offset, torn = wal.parse_records(record, 0)
    assert offset == len(record) and not torn
    assert [(k, p, m) for k, p, m, _ in parsed] == [(wal.INSERT, 5, "ü"), (wal.DELETE, 0, "x")]


@pytest.mark.django_db(databases="__all__")
def test_verify_index_tells_pending_commits_from_drift(comments_table, settings, tmp_path):
    import io

    from django.core.management import CommandError

    from pagination_index import get_index
    from tests import factories

    settings.PAGINATION_INDEX = index_config(**{"BACKEND": "pagination_index.backends.files.FileIndex",
                                 "OPTIONS": {"PATH": str(tmp_path / "i"), "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 10**9}})
    factories.seed("A", 30, seed=1)
    call_command("sync_index", once=True, verbosity=0)
    index = get_index()
    assert index.pending_changes("A") == 30
    out = io.StringIO()
    call_command("verify_index", recheck_seconds=0, verbosity=2, stdout=out)
    assert "A: table 30, index 30, missing 0, extra 0, misordered 0, pending commit 30" in out.getvalue()
    assert "pending commit (read already, not drift)" in out.getvalue()
    index.remove_many("A", [index.at("A", 5)[0]])  # real drift, beside the pending changes
    with pytest.raises(CommandError):
        call_command("verify_index", recheck_seconds=0, verbosity=0, stdout=io.StringIO(), stderr=io.StringIO())
    call_command("commit_index", verbosity=0)
    with pytest.raises(CommandError):
        call_command("verify_index", recheck_seconds=0, verbosity=0, stdout=io.StringIO(), stderr=io.StringIO())


@pytest.mark.parametrize("layout", ["uuid", "packed"])
def test_check_integrity_finds_a_repeated_member_a_misordered_record_and_a_bad_checksum_across_chunks(
        index, monkeypatch, layout):
    """check_integrity reads a generation a chunk at a time (memory flat in the group's size): what it
    must find is found wherever it lies, a chunk boundary included."""
    import pagination_index.backends.files.index as files_index

    monkeypatch.setattr(files_index, "CHECK_CHUNK", 4)
    rng = random.Random(5)
    members = [uuid_member(rng) if layout == "uuid" else f"m{n:02d}" for n in range(10)]
    entries = [(member, sk(100 - n)) for n, member in enumerate(members)]  # newest first
    fmt_layout, size = fmt.layout_for(members)
    neighbour = same_pack(index, "g")

    def publish(records, corrupt=False):
        data = fmt.encode_records(records, fmt_layout, size)
        header = fmt.encode_header(group="g", layout=fmt_layout, record_size=size, count=len(records),
                                   generation=1, records_crc=zlib.crc32(data))
        written = index.storage.temporary("g")
        written.write(header + data)
        index.storage.publish("g", 1, written)  # appended to its pack: readers see it at once
        written.discard()
        index.replace(neighbour, [("n", sk(1))])  # after it in the pack
        if corrupt:  # the last byte of its records (a member's, or padding): order and members hold
            generation = index.storage.open("g").generation
            end = generation.base + generation.header.data_offset + len(data)
            with open(index.storage.pack_path("g"), "r+b") as pack:
                pack.seek(end - 1)
                last = pack.read(1)
                pack.seek(end - 1)
                pack.write(bytes([last[0] ^ 1]))
        return index.check_integrity("g")

    assert publish(entries) == []
    repeated = entries[:5] + [(members[0], sk(95))] + entries[6:]  # member 0 again, in chunk 2, in order
    assert any("appears twice" in p for p in publish(repeated))
    swapped = entries[:3] + [entries[4], entries[3]] + entries[5:]  # across the boundary of chunks 1 and 2
    assert any("out of order" in p for p in publish(swapped))
    assert any("checksum" in p for p in publish(entries, corrupt=True))


def test_a_commit_removes_dead_writers_files_and_leaves_a_live_one(index):
    """A rebuild writes its generation file without the group's lock, holding flock(2) on the file
    instead: a committer meanwhile removes only the files nobody holds."""
    index.replace("g", [(uuid.uuid4().hex, sk(1))])
    live = index.journal.temporary("g")  # a writer at work: its file locked
    live.reserve_header("g")
    folder, digest = live.path.parent, index.journal.digest("g")
    dead = folder / f"{digest}.tmp.0123456789abcdef"  # a writer killed mid-write: nobody holds it
    dead.write_bytes(b"half")
    compaction = folder / f"{digest[:4]}.tmp.0123456789abcdef"  # the pack's compaction, killed
    compaction.write_bytes(b"half")
    fresh, stale = folder / f"{digest}.new.aaaaaaaaaaaaaaaa", folder / f"{digest}.new.bbbbbbbbbbbbbbbb"
    fresh.write_bytes(b"")  # a writer between open() and flock(): left for GRACE_SECONDS
    stale.write_bytes(b"")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    neighbour = folder / f"{digest[:3]}{'0' if digest[3] != '0' else '1'}{'0' * 28}.tmp.0123456789abcdef"
    neighbour.write_bytes(b"half")  # another pack's: its own committers tidy it, under its lock
    other = FileIndex(index.options)  # another process's view: flock conflicts across open files
    other.add_many("g", [(uuid.uuid4().hex, sk(2))])
    assert other.commit("g")
    assert live.path.exists() and fresh.exists()
    assert neighbour.exists() and not (dead.exists() or compaction.exists() or stale.exists())
    # On NFS flock(2) is a POSIX lock, which never stops its own process: this process's live
    # writer is known without it.
    fcntl.flock(live.fd, fcntl.LOCK_UN)
    other.add_many("g", [(uuid.uuid4().hex, sk(4))])
    assert other.commit("g")
    assert live.path.exists()
    live.write(fmt.uuid_records({uuid.uuid4().hex: sk(3)}).view("u1"))
    live.count = 1
    with index._locked("g"):
        index._swap_in("g", index._view("g"), live, fmt.UUID24, 24)
    live.discard()
    assert index.count("g") == 1 and index.check_integrity("g") == []
    assert not list(folder.glob(f"{digest}.tmp.*"))


@pytest.mark.parametrize("directory", [True, False], ids=["with-its-directory", "before-its-directory"])
def test_a_generation_torn_by_a_power_loss_is_never_read_and_the_next_append_cuts_it_off(index, directory):
    """An append is one flush: a crash before it ends can leave the new generation's header (and the
    directory naming it) on disk without all its records. A read checks the pack's last generation
    against its records' checksum."""
    rng = random.Random(8)
    first = [(uuid_member(rng), sk(n)) for n in range(100)]
    index.replace("g", first)
    path = index.storage.pack_path("g")
    whole = path.stat().st_size
    records = fmt.uuid_records(dict((uuid_member(rng), sk(n)) for n in range(50))).view("u1").tobytes()
    header = fmt.encode_header(group="g", layout=fmt.UUID24, record_size=24, count=50, generation=2,
                               records_crc=zlib.crc32(records))
    torn = header + records[: len(records) // 2] + bytes(len(records) - len(records) // 2)
    if directory:
        torn += fmt.encode_directory({index.storage.digest("g"): (whole, len(header) + len(records))})
    with open(path, "ab") as pack:  # the header and half the records made it to disk
        pack.write(torn)
    reader = FileIndex(index.options)
    assert reader.count("g") == 100 and reader.range("g", 0, 100) == newest_first(first)
    neighbour = same_pack(index, "g")
    reader.add_many(neighbour, [("n", sk(1))])
    reader.commit(neighbour)  # the next append to the pack: the torn generation goes
    assert path.stat().st_size > whole and reader.range("g", 0, 100) == newest_first(first)
    assert FileIndex(index.options).count(neighbour) == 1 and reader.check_integrity("g") == []
    with open(path, "rb") as pack:
        assert pack.read()[whole:].count(records[:24]) == 0  # cut off, not left inside the pack


def test_a_first_look_at_a_group_reads_its_packs_directory_not_every_header(index, monkeypatch):
    """Every append ends with the pack's directory: a reader new to the pack reads its tail and the
    group's header (two reads), however many groups share the pack."""
    from pagination_index.backends.files import storage

    rng = random.Random(10)
    groups = ["g"] + [same_pack(index, "g")]
    while len(groups) < 9:
        groups.append(next(f"m{n}" for n in itertools.count() if f"m{n}" not in groups
                           and index.storage.bucket(f"m{n}") == index.storage.bucket("g")))
    contents = {group: [(uuid_member(rng), sk(n)) for n in range(50 + i)] for i, group in enumerate(groups)}
    for group, entries in contents.items():
        index.replace(group, entries)
    index.replace("g", contents["g"][:20])  # a second generation of the first: the first is garbage
    contents["g"] = contents["g"][:20]
    reads = []
    real_pread = os.pread
    monkeypatch.setattr(storage.os, "pread", lambda fd, n, at: reads.append(at) or real_pread(fd, n, at))
    for group in groups[1:-1]:  # (the pack's last generation is also checked against its checksum)
        reads.clear()
        opened = LocalStorage(index.storage.root).open(group)
        assert len(reads) == 2 and opened.generation.header.count == len(contents[group])
    monkeypatch.undo()
    for group, entries in contents.items():
        assert FileIndex(index.options).range(group, 0, 100) == newest_first(entries)


def test_a_pack_written_before_directories_is_scanned_and_gains_one(index):
    """A pack of the previous version (generations with no directory after them) reads as before, by
    a scan; check_index names it; its next append or commit_index --compact gives it a directory."""
    from pagination_index.backends.files.storage import Handle, scan_pack

    rng = random.Random(11)
    contents = {group: [(uuid_member(rng), sk(n)) for n in range(40)] for group in ("g", same_pack(index, "g"))}
    for group, entries in contents.items():
        index.replace(group, entries)
    path = index.storage.pack_path("g")
    fd = os.open(path, os.O_RDONLY)
    pack = scan_pack(Handle(fd), 0, os.fstat(fd).st_size)
    data = path.read_bytes()
    path.write_bytes(b"".join(data[entry.offset: entry.offset + entry.length]
                              for entry in sorted(pack.entries.values(), key=lambda entry: entry.offset)))
    assert not index.storage.has_directory(str(path))
    for group, entries in contents.items():
        assert FileIndex(index.options).range(group, 0, 50) == newest_first(entries)
    assert index.check_format() == ["1 of 1 packs take more disk blocks than their live generations need or have no "
                                    "directory (a bulk load, a full rebuild or an older version leaves them so): "
                                    "`manage.py commit_index --compact` rewrites them"]
    assert index.compact_packs() == 1 and index.check_format() == [] and index.storage.has_directory(str(path))
    for group, entries in contents.items():
        assert FileIndex(index.options).range(group, 0, 50) == newest_first(entries)
    path.write_bytes(data[: data.index(fmt.DIRECTORY_MAGIC)])  # the first group's generation alone, then an append
    index.replace("g", contents["g"][:5])
    assert index.storage.has_directory(str(path)) and FileIndex(index.options).range("g", 0, 50) == newest_first(contents["g"][:5])


def write_old_layout(root: Path, group: str, entries: list, log_changes: list | None, generation: int = 1) -> None:
    """A group as the older layout kept it: PATH/ab/cd/<digest>/ with `name`, `data` (a generation
    file, the format unchanged) and `log.<generation>` (b"PIDXLOG1" header: no name)."""
    import hashlib
    import struct

    digest = hashlib.sha256(group.encode()).hexdigest()[:32]
    folder = root / digest[:2] / digest[2:4] / digest
    folder.mkdir(parents=True)
    (folder / "name").write_bytes(group.encode())
    (folder / "lock").write_bytes(b"")
    if entries:
        layout, size = fmt.layout_for(member for member, _ in entries)
        records = fmt.encode_records(newest_first(entries), layout, size)
        (folder / "data").write_bytes(fmt.encode_header(group=group, layout=layout, record_size=size, count=len(entries),
                                                        generation=generation, records_crc=zlib.crc32(records)) + records)
    if log_changes is not None:
        base = 0 if not entries else generation
        head = struct.pack(">8sQq", b"PIDXLOG1", base, 1_700_000_000_000_000)
        (folder / f"log.{base}").write_bytes(head + struct.pack(">I", zlib.crc32(head)) + wal.encode_record(log_changes))


def test_migrate_files_index_moves_the_older_layout_into_packs_keeping_generations_and_logs(tmp_path, settings):
    from django.core.management import CommandError

    from pagination_index.backends.base import IndexUnavailable

    root = tmp_path / "index"
    options = {"PATH": str(root), "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 10**9}
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": "pagination_index.backends.files.FileIndex", "OPTIONS": options})
    rng = random.Random(12)
    small = [(uuid_member(rng), sk(n)) for n in range(1, 300)]
    large = [(uuid_member(rng), sk(n)) for n in range(1, 50_001)]  # 1.2 MB: a file of its own
    newest = (uuid_member(rng), sk(900_000))
    write_old_layout(root, "small", small, [(wal.DELETE, 0, fmt.encode_key(newest_first(small)[0][1]), newest_first(small)[0][0]),
                                           (wal.INSERT, 0, fmt.encode_key(newest[1]), newest[0])], generation=4)
    write_old_layout(root, "large", large, None, generation=2)
    write_old_layout(root, "logged", [], [(wal.INSERT, 0, fmt.encode_key(sk(5)), "Café")])
    with pytest.raises(IndexUnavailable, match="migrate_files_index"):
        FileIndex(options).count("small")  # refused, not misread: deep pages answer 503
    assert FileIndex(options).check_format() == [
        "3 groups in the older layout (a folder per group): stop sync_index and run `manage.py migrate_files_index`"]
    out = __import__("io").StringIO()
    call_command("migrate_files_index", dry_run=True, stdout=out)
    assert "would move 3 groups" in out.getvalue()
    call_command("migrate_files_index", stdout=out, stderr=__import__("io").StringIO())
    assert "moved 3 groups" in out.getvalue()
    index = FileIndex(options)
    assert index.range("small", 0, 400) == [newest] + newest_first(small)[1:]
    assert index.pending_changes("small") == 2 and index.storage.open("small").generation.header.generation == 4
    assert index.range("large", 0, 50_000) == newest_first(large)
    assert index.range("logged", 0, 5) == [("Café", sk(5))]
    assert index.groups() == ["large", "logged", "small"] and index.pending_groups() == ["logged", "small"]
    assert all(index.check_integrity(group) == [] for group in index.groups())
    assert not list(root.glob("??/??")) and (root / "LAYOUT").exists()
    assert len(list(root.glob("??/*.pack"))) == 2 and len(list(root.glob("??/*.2"))) == 1  # "logged" has only a log
    index.commit("small")
    assert index.range("small", 0, 400) == [newest] + newest_first(small)[1:] and index.pending_changes("small") == 0
    call_command("migrate_files_index", stdout=out, stderr=__import__("io").StringIO())  # nothing left: harmless
    with pytest.raises(CommandError):
        settings.PAGINATION_INDEX = index_config(**{"BACKEND": "pagination_index.backends.relational.RelationalIndex"})
        call_command("migrate_files_index", stdout=out)


def test_compact_packs_rewrites_a_pack_taking_more_disk_blocks_than_its_bytes(index):
    """A bulk build leaves packs in many pieces on disk (ext4 then gives a pack an extent block): the
    same excess blocks, made here with fallocate(FALLOC_FL_KEEP_SIZE), are what compact_packs() looks for."""
    import ctypes

    rng = random.Random(9)
    groups = {"g": [(uuid_member(rng), sk(n)) for n in range(300)]}
    groups[same_pack(index, "g")] = [(uuid_member(rng), sk(n)) for n in range(200)]
    for group, entries in groups.items():
        index.replace(group, entries)
    path = str(index.storage.pack_path("g"))
    reader = FileIndex(index.options)
    assert reader.range("g", 0, 5) == newest_first(groups["g"])[:5]  # a view of the pack as it is
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDWR)
    try:
        assert libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(1 << 20)) == 0  # FALLOC_FL_KEEP_SIZE
    finally:
        os.close(fd)
    size = os.stat(path).st_size
    assert index.storage.needs_compaction(path)
    assert index.check_format() == ["1 of 1 packs take more disk blocks than their live generations need or have no "
                                    "directory (a bulk load, a full rebuild or an older version leaves them so): "
                                    "`manage.py commit_index --compact` rewrites them"]
    assert index.compact_packs() == 1 and index.compact_packs() == 0 and index.check_format() == []
    # the same bytes but the first append's directory (one group's), superseded by the second's
    assert not index.storage.needs_compaction(path) and os.stat(path).st_size == size - fmt.directory_size(1)
    for group, entries in groups.items():
        assert FileIndex(index.options).range(group, 0, 400) == newest_first(entries)
    assert reader.range("g", 0, 300) == newest_first(groups["g"])  # the old file, then the new one


@pytest.mark.django_db(databases="__all__")
def test_a_full_rebuild_index_leaves_packs_in_one_piece(comments_table, settings, tmp_path):
    import ctypes
    import io

    from pagination_index import get_index
    from tests import factories

    settings.PAGINATION_INDEX = index_config(**{"BACKEND": "pagination_index.backends.files.FileIndex",
                                 "OPTIONS": {"PATH": str(tmp_path / "i"), "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 10**9}})
    factories.seed("A", 30, seed=2)
    call_command("rebuild_index", verbosity=0)
    index = get_index()
    path = str(index.storage.pack_path("A"))
    fd = os.open(path, os.O_RDWR)
    try:  # as a bulk load's appends among other packs' leave it on ext4: more blocks than its bytes need
        assert ctypes.CDLL(None, use_errno=True).fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(1 << 20)) == 0
    finally:
        os.close(fd)
    assert index.storage.needs_compaction(path)
    out, err = io.StringIO(), io.StringIO()
    call_command("rebuild_index", verbosity=1, stdout=out, stderr=err)
    assert not index.storage.needs_compaction(path) and index.count("A") == 30
    assert "rewrote 1 pack(s) in one piece" in out.getvalue() + err.getvalue()
