"""The relational backend's counted blocks: the contract with tiny blocks (splits and merges on
almost every write) on SQLite and PostgreSQL, a stateful property test against a sorted list,
concurrent writers, and the block checks."""
from __future__ import annotations

import random
import threading
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from pagination_index.backends.base import Add, Remove, newest_first
from pagination_index.backends.relational import PlainRelationalIndex, RelationalIndex
from pagination_index.models import IndexBlock, IndexGroup
from pagination_index.testing import sk
from tests.pagination_index.test_backends import RelationalContract
from tests.config import index_config

# Splits above 8 entries, merges under 2; upper blocks split above 6 children, merge at 1.
TINY = {"BLOCK_SIZE": 4, "FANOUT": 3}


def assert_blocks_sound(index, group):
    assert index.check_integrity(group) == []


@pytest.mark.django_db
class TestTinyBlocksOnSQLite(RelationalContract):
    # Two entries a group never split a block; the default-size runs in test_backends.py cover it.
    test_thousands_of_groups = None

    @pytest.fixture
    def index(self):
        return RelationalIndex(TINY)


@pytest.mark.django_db(databases="__all__")
class TestTinyBlocksOnPostgreSQL(RelationalContract):
    test_thousands_of_groups = None  # as on SQLite

    @pytest.fixture
    def index(self, postgres_database):
        return RelationalIndex(dict(TINY, DATABASE=postgres_database))


# --- the blocks themselves ------------------------------------------------------------------------
def entries(n, prefix="m"):
    return [(f"{prefix}{i:05d}", sk(i % 997)) for i in range(n)]


def test_deep_ranks_touch_a_bounded_number_of_rows(db, django_assert_max_num_queries):
    index = RelationalIndex({"BLOCK_SIZE": 8, "FANOUT": 4})
    index.replace("g", entries(3000))
    state = IndexGroup.objects.get(name="g")
    assert state.levels >= 3  # 3000 / 8 leaves need several levels at fanout 4
    expected = newest_first(entries(3000))
    # the group's row, one scan per level, one entry read, the version re-check
    with django_assert_max_num_queries(state.levels + 3):
        assert index.at("g", 2999) == expected[2999]
    for rank in (0, 1, 7, 8, 1499, 1500, 2991, 2998):
        assert index.at("g", rank) == expected[rank]
    assert index.range("g", 1234, 1300) == expected[1234:1300]
    assert_blocks_sound(index, "g")


def test_replace_builds_blocks_within_their_bounds(db):
    index = RelationalIndex({"BLOCK_SIZE": 10, "FANOUT": 4})
    index.replace("g", entries(1005))
    leaves = list(IndexBlock.objects.filter(level=0).order_by("floor_sort_key", "floor_member").values_list("count", flat=True))
    assert leaves[:-1] == [10] * 100 and leaves[-1] == 5
    assert sum(leaves) == 1005
    assert_blocks_sound(index, "g")
    index.replace("g", [])
    assert index.count("g") == 0 and index.at("g", 0) is None
    assert_blocks_sound(index, "g")


def test_one_big_add_is_split_into_many_blocks_and_levels(db):
    index = RelationalIndex({"BLOCK_SIZE": 4, "FANOUT": 3})
    index.add_many("g", [("first", sk(1))])
    index.add_many("g", entries(500))
    assert IndexGroup.objects.get(name="g").levels >= 4
    assert index.range("g", 0, 1000) == newest_first(entries(500) + [("first", sk(1))])
    assert_blocks_sound(index, "g")
    index.remove_many("g", [member for member, _ in entries(499)])
    assert index.range("g", 0, 10) == newest_first([("first", sk(1)), ("m00499", sk(499))])
    assert IndexGroup.objects.get(name="g").levels == 1
    assert_blocks_sound(index, "g")


def test_check_blocks_finds_wrong_counts_and_rebuild_repairs_them(db):
    index = RelationalIndex({"BLOCK_SIZE": 4, "FANOUT": 3})
    index.add_many("g", entries(40))
    block = IndexBlock.objects.filter(level=0).order_by("-floor_sort_key").first()
    IndexBlock.objects.filter(pk=block.pk).update(count=block.count + 1)
    IndexGroup.objects.filter(name="g").update(count=41)
    problems = index.check_integrity("g")
    assert any("count 41" in problem or "group count is 41" in problem for problem in problems)
    assert any(f"count {block.count + 1}, covers {block.count}" in problem for problem in problems)
    index.repair_group("g")
    assert index.check_integrity("g") == []
    assert index.count("g") == 40


def test_a_group_filled_before_the_blocks_existed_reads_and_is_built_on_its_next_write(db):
    PlainRelationalIndex({}).add_many("g", entries(30))
    index = RelationalIndex({"BLOCK_SIZE": 4, "FANOUT": 3})
    expected = newest_first(entries(30))
    assert index.at("g", 29) == expected[29]
    assert index.check_integrity("g") == ["no blocks for 30 entries"]
    index.add_many("g", [("new", sk(5000))])
    assert index.at("g", 0) == ("new", sk(5000)) and index.at("g", 30) == expected[29]
    assert_blocks_sound(index, "g")


def blocks_of(index, group):
    return list(IndexBlock.objects.using(index.using).filter(group__name=group)
                .order_by("level", "floor_sort_key", "floor_member").values_list("level", "floor_sort_key", "floor_member", "count"))


def bulk_writes_rebuild_the_blocks(index):
    index.bulk_changes = 40  # writes of 40+ changes, a quarter of the group or more, rebuild
    index.add_many("g", entries(100))
    index.add_many("g", [(member, sk(2000)) for member, _ in entries(30)])  # 60 changes (30 moves): rebuilt
    index.remove_entries("g", [(member, sk(2000)) for member, _ in entries(10)] + [("m00099", None)])
    expected = newest_first([*[(m, sk(2000)) for m, _ in entries(30)[10:]], *entries(99)[30:]])
    assert index.range("g", 0, 200) == expected
    assert_blocks_sound(index, "g")
    index.add_many("g", entries(150, prefix="n"))  # 150 of 239: rebuilt, laid out as a fresh build
    written = blocks_of(index, "g")
    index.repair_group("g")
    assert written == blocks_of(index, "g")
    index.add_many("g", entries(5, prefix="o"))  # 5 changes: counted into the blocks, none split
    written = blocks_of(index, "g")
    index.repair_group("g")
    assert written != blocks_of(index, "g")
    assert index.range("g", 0, 300) == newest_first(expected + entries(150, prefix="n") + entries(5, prefix="o"))
    assert_blocks_sound(index, "g")


def test_bulk_writes_rebuild_the_blocks_on_sqlite(db):
    bulk_writes_rebuild_the_blocks(RelationalIndex(TINY))


@pytest.mark.django_db(databases="__all__")
def test_bulk_writes_rebuild_the_blocks_on_postgresql(postgres_database):
    bulk_writes_rebuild_the_blocks(RelationalIndex(dict(TINY, DATABASE=postgres_database)))


@pytest.mark.django_db(databases="__all__")
def test_one_batch_of_many_groups_on_postgresql(postgres_database):
    """A stream-like batch: adds, moves, conditional and plain removes across 30 groups, counted
    into tiny blocks by one statement, each group's blocks exact afterwards."""
    index = RelationalIndex(dict(TINY, DATABASE=postgres_database))
    groups = [f"G{n:02d}" for n in range(30)]
    model = {group: dict(entries(40)) for group in groups}
    index.apply([Add(group, member, sort_key) for group in groups for member, sort_key in entries(40)])
    rng = random.Random(7)
    ops = []
    for group in groups:
        for member, sort_key in rng.sample(entries(40), 12):
            choice = rng.randrange(4)
            if choice == 0:
                ops.append(Remove(group, member, sort_key))  # still its key: removed
                model[group].pop(member)
            elif choice == 1:
                ops.append(Remove(group, member, sk(3000)))  # not its key: kept
            elif choice == 2:
                ops.append(Add(group, member, sk(rng.randrange(5000))))
                model[group][member] = ops[-1].sort_key
            else:
                ops.append(Remove(group, member))
                model[group].pop(member)
        ops += [Add(group, f"new{i}", sk(rng.randrange(5000))) for i in range(10)]
        model[group].update((op.member, op.sort_key) for op in ops[-10:])
    index.apply(ops)
    for group in groups:
        assert index.range(group, 0, 100) == newest_first(model[group].items())
        assert index.count(group) == len(model[group])
        assert_blocks_sound(index, group)


@pytest.mark.django_db(databases="__all__")
def test_replace_stores_a_group_in_index_order_on_postgresql(postgres_database):
    """replace() inserts the entries newest first (a member given twice keeps its last sort key),
    so a rank read that visits the table reads consecutive pages (bench/notes/scaling.md)."""
    index = RelationalIndex(dict(TINY, DATABASE=postgres_database))
    given = entries(300)
    random.Random(3).shuffle(given)
    given.append((given[0][0], sk(2000)))  # moved by a later pair
    index.replace("g", given)
    with connections[postgres_database].cursor() as cursor:
        cursor.execute('SELECT member, sort_key FROM pagination_index_indexentry WHERE "group" = %s ORDER BY ctid', ["g"])
        stored = cursor.fetchall()
    assert stored == newest_first(dict(given).items())
    assert index.range("g", 0, 400) == stored


@pytest.mark.django_db(databases="__all__")
def test_a_read_of_a_group_not_seen_before_is_two_statements_on_postgresql(postgres_database):
    """The group's row and its top level blocks come in one statement (LATERAL) even for a group
    this index object has never read: a one-entry range() of a one-level group is that and the
    entry read; at() is one statement at any depth (pagination_index_locate, migration 0008)."""
    from django.test.utils import CaptureQueriesContext

    RelationalIndex(dict(DATABASE=postgres_database, BLOCK_SIZE=8, FANOUT=3)).replace("deep", entries(1500))
    RelationalIndex(dict(DATABASE=postgres_database)).replace("g", entries(1500))
    expected = newest_first(entries(1500))
    for rank in (0, 700, 1499):
        fresh = RelationalIndex(dict(DATABASE=postgres_database))
        with CaptureQueriesContext(connections[postgres_database]) as queries:
            assert fresh.range("g", rank, rank + 1) == [expected[rank]]
        assert len(queries) == 2, [query["sql"] for query in queries]
        for group in ("g", "deep"):
            with CaptureQueriesContext(connections[postgres_database]) as queries:
                assert fresh.at(group, rank) == expected[rank]
            assert [query["sql"] for query in queries] == [
                f"SELECT sort_key, member FROM pagination_index_locate('{group}', {rank})"]
    assert RelationalIndex(dict(DATABASE=postgres_database, BLOCK_SIZE=8, FANOUT=3))._state("deep")[0].levels >= 3
    assert fresh.at("missing", 0) is None
    assert fresh.at("g", 1500) is None and fresh.at("g", -1) is None


@pytest.mark.django_db(databases="__all__")
def test_replayed_and_moved_adds_on_postgresql(postgres_database):
    """Adds of members already there (a stream replay: same sort key; an edit: a new one) beside new
    ones, and a member removed and added back in one batch: only real changes are counted, a batch
    of replays alone leaves the group as it was (count, blocks and version)."""
    index = RelationalIndex(dict(TINY, DATABASE=postgres_database))
    model = {group: dict(entries(60)) for group in ("a", "b")}
    index.apply([Add(group, member, sort_key) for group in model for member, sort_key in entries(60)])
    version = IndexGroup.objects.using(postgres_database).get(name="a").version
    written = blocks_of(index, "a")
    index.apply([Add("a", member, sort_key) for member, sort_key in entries(60)[::3]])  # replays only
    assert IndexGroup.objects.using(postgres_database).get(name="a").version == version
    assert blocks_of(index, "a") == written
    adds = {group: [] for group in model}
    for group in model:
        adds[group] += entries(60)[::2]  # replays
        adds[group] += [(member, sk(900 + i)) for i, (member, _) in enumerate(entries(60)[1::4])]  # moved up
        adds[group] += entries(20, prefix="n")  # new
        for member, sort_key in adds[group]:
            model[group][member] = sort_key
    # m00001: removed and added back with a new key; m00003: removed (it has that key); m00005: a
    # conditional remove of a key it does not have, and moved by the adds.
    index.apply_net(adds, {"a": [("m00001", None), ("m00003", sk(3))], "b": [("m00005", sk(1))]})
    model["a"].pop("m00003")
    for group in model:
        assert index.range(group, 0, 200) == newest_first(model[group].items())
        assert index.count(group) == len(model[group])
        assert_blocks_sound(index, group)


# --- a stateful property test against a sorted list -----------------------------------------------
MEMBERS = st.sampled_from([f"m{i:02d}" for i in range(40)])
SORT_KEYS = st.integers(0, 12).map(sk)  # few distinct sort keys: many ties, broken by member


class BlocksMatchASortedList(RuleBasedStateMachine):
    """Random adds, removes, moves, replaces, batches and count_newer on tiny blocks, so that nearly every step
    splits or merges a block somewhere; after each step the index equals a sorted list."""

    make_index = None  # set by the test that runs the machine

    def __init__(self):
        super().__init__()
        self.index = type(self).make_index()
        self.model: dict[str, dict[str, str]] = {"g": {}, "h": {}}

    def expected(self, group="g"):
        return newest_first(self.model[group].items())

    @rule(batch=st.lists(st.tuples(MEMBERS, SORT_KEYS), max_size=30))
    def add(self, batch):
        self.index.add_many("g", batch)
        self.model["g"].update(batch)

    @rule(members=st.lists(MEMBERS, max_size=20))
    def remove(self, members):
        self.index.remove_many("g", members)
        for member in members:
            self.model["g"].pop(member, None)

    @precondition(lambda self: self.model["g"])
    @rule(data=st.data(), sort_key=SORT_KEYS)
    def move(self, data, sort_key):
        member = data.draw(st.sampled_from(sorted(self.model["g"])))
        self.index.add_many("g", [(member, sort_key)])
        self.model["g"][member] = sort_key

    @rule(batch=st.lists(st.tuples(MEMBERS, SORT_KEYS), max_size=60))
    def replace(self, batch):
        self.index.replace("g", batch)
        self.model["g"] = dict(batch)

    @rule(ops=st.lists(st.one_of(
        st.builds(Add, st.sampled_from(["g", "h"]), MEMBERS, SORT_KEYS),
        st.builds(Remove, st.sampled_from(["g", "h"]), MEMBERS),
    ), max_size=40))
    def apply(self, ops):
        self.index.apply(ops)
        for op in ops:
            if isinstance(op, Add):
                self.model[op.group][op.member] = op.sort_key
            else:
                self.model[op.group].pop(op.member, None)

    @rule(data=st.data())
    def at(self, data):
        expected = self.expected()
        rank = data.draw(st.integers(-1, len(expected) + 1))
        assert self.index.at("g", rank) == (expected[rank] if 0 <= rank < len(expected) else None)

    @rule(sort_key=SORT_KEYS, member=st.one_of(st.none(), MEMBERS))
    def count_newer(self, sort_key, member):
        expected = sum(1 for entry in self.expected() if (entry[1] > sort_key if member is None
                                                           else (entry[1], entry[0]) > (sort_key, member)))
        found = self.index.count_newer("g", sort_key, member)
        assert found == expected and type(found) is int

    @rule(start=st.integers(0, 45), length=st.integers(0, 20))
    def range(self, start, length):
        assert self.index.range("g", start, start + length) == self.expected()[start : start + length]

    @invariant()
    def matches(self):
        for group in ("g", "h"):
            assert self.index.count(group) == len(self.model[group])
            assert self.index.range(group, 0, 100) == self.expected(group)
            assert self.index.check_integrity(group) == []


MACHINE_SETTINGS = settings(max_examples=25, stateful_step_count=25, deadline=None, database=None,
                            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def run_machine(make_index, machine_settings=MACHINE_SETTINGS):
    machine = type("Machine", (BlocksMatchASortedList,), {"make_index": staticmethod(make_index)})
    run_state_machine_as_test(machine, settings=machine_settings)


def test_blocks_match_a_sorted_list_on_sqlite(db):
    def make_index():
        index = RelationalIndex(TINY)
        index.clear()
        return index

    run_machine(make_index)


@pytest.mark.django_db(databases="__all__")
def test_blocks_match_a_sorted_list_on_postgresql(postgres_database):
    def make_index():
        index = RelationalIndex(dict(TINY, DATABASE=postgres_database))
        index.clear()
        return index

    run_machine(make_index, settings(MACHINE_SETTINGS, max_examples=10))


# --- check_index ----------------------------------------------------------------------------------
def test_check_index_reports_and_repairs(db, settings):
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": "pagination_index.backends.relational.RelationalIndex", "OPTIONS": TINY})
    index = RelationalIndex(TINY)
    index.add_many("A", entries(50))
    index.add_many("B", entries(5))
    out = StringIO()
    call_command("check_index", stdout=out, stderr=StringIO())
    assert "RelationalIndex: 2 groups pass their integrity checks" in out.getvalue()

    IndexBlock.objects.filter(group__name="A", level=0).update(count=0)
    out = StringIO()
    with pytest.raises(CommandError, match="1 of 2 groups have problems"):
        call_command("check_index", stdout=out, stderr=StringIO())
    assert "A: level 0 block" in out.getvalue()

    out = StringIO()
    call_command("check_index", "--group", "A", "--repair", stdout=out, stderr=StringIO())
    assert "A: repaired" in out.getvalue() and "1 groups pass" in out.getvalue()
    assert index.check_integrity("A") == [] and index.range("A", 0, 100) == newest_first(entries(50))


def test_check_index_passes_a_backend_without_derived_structures(db, settings):
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": "pagination_index.backends.relational.PlainRelationalIndex", "OPTIONS": {}})
    PlainRelationalIndex({}).add_many("A", entries(5))
    out = StringIO()
    call_command("check_index", stdout=out, stderr=StringIO())
    assert "PlainRelationalIndex: 1 groups pass their integrity checks" in out.getvalue()


# --- concurrent writers ---------------------------------------------------------------------------
def concurrent_writers_keep_blocks_exact(index):
    """Threads adding, moving and removing their own members of one group, each batch its own
    transaction, with a reader walking the blocks meanwhile: the blocks end exact."""
    errors, done = [], threading.Event()

    def writer(number):
        try:
            rng = random.Random(number)
            mine = [f"w{number}-{i:03d}" for i in range(60)]
            for _ in range(25):
                index.apply([Add("g", member, sk(rng.randrange(30))) for member in rng.sample(mine, 8)]
                            + [Remove("g", member) for member in rng.sample(mine, 3)])
            index.remove_many("g", mine[:30])
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    def reader():
        try:
            while not done.is_set():
                count = index.count("g")
                entries = index.range("g", 0, 1000)
                assert len(entries) == len({member for member, _ in entries})
                assert count >= 0
        except Exception as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(number,)) for number in range(4)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    watcher.join()
    assert not errors
    assert index.check_integrity("g") == []
    assert index.count("g") == len(index.range("g", 0, 1000)) > 0
    assert all(member.split("-")[1] >= "030" for member, _ in index.range("g", 0, 1000))


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_keep_blocks_exact_on_sqlite():
    concurrent_writers_keep_blocks_exact(RelationalIndex(TINY))


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_concurrent_writers_keep_blocks_exact_on_postgresql(postgres_database):
    concurrent_writers_keep_blocks_exact(RelationalIndex(dict(TINY, DATABASE=postgres_database)))
