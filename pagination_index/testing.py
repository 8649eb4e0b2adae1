"""The contract suite: behaviour every pagination index backend must have, one sorted set of
(member, sort key) per group, newest first. Shipped with the library so a third-party backend proves
itself against the same cases as the built-in ones (docs/library/backends.md, "Writing a backend").

Like Django's tests/cache/tests.py: one plain mixin holds the behaviours, and each backend is a tiny
pytest class whose `index` fixture returns a fresh, empty backend on a real store:

    from pagination_index.testing import IndexContract

    class TestMyIndex(IndexContract):
        @pytest.fixture
        def index(self):
            backend = MyIndex({...})
            yield backend
            backend.clear()

Run it with pytest and pytest-django (the tests take `db` where the backend writes the database).
"""
from __future__ import annotations

import random
import threading

from django.db import connections

from pagination_index.backends.base import Add, Remove, newest_first

SK = "2021-08-25T13:00:00.{:06d}Z"


def sk(n: int) -> str:
    return SK.format(n)


def read_while_writing(index, writer, count) -> tuple[set, set]:
    """Run writer() while another thread keeps reading group "g" and count(); returns what the reader
    saw: (number of entries, their member prefixes) per read of "g", and every count() value."""
    seen, counts, errors = set(), set(), []
    done = threading.Event()

    def reader():
        try:
            while not done.is_set():
                entries = index.range("g", 0, 1000)
                seen.add((len(entries), frozenset(member[:3] for member, _ in entries)))
                counts.add(count())
        except Exception as exc:  # surfaced by the assertion below, not lost in the thread
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        writer()
    finally:
        done.set()
        thread.join()
    assert not errors
    return seen, counts


class IndexContract:
    def test_empty_and_unknown_groups(self, index):
        assert index.count("nothing-here") == 0
        assert index.at("nothing-here", 0) is None
        assert index.range("nothing-here", 0, 10) == []
        index.add_many("g", [("a", sk(1))])
        index.remove_many("g", ["a"])
        assert index.count("g") == 0
        assert index.at("g", 0) is None

    def test_newest_first_with_ties_by_member(self, index):
        entries = [("m1", sk(5)), ("m3", sk(5)), ("m2", sk(5)), ("old", sk(1)), ("new", sk(9))]
        index.add_many("g", entries)
        assert index.range("g", 0, 10) == [("new", sk(9)), ("m3", sk(5)), ("m2", sk(5)), ("m1", sk(5)), ("old", sk(1))]
        assert index.range("g", 0, 10) == newest_first(entries)

    def test_at_first_last_and_past_the_end(self, index):
        entries = [(f"m{i:03d}", sk(i)) for i in range(50)]
        index.add_many("g", entries)
        assert index.at("g", 0) == ("m049", sk(49))
        assert index.at("g", 49) == ("m000", sk(0))
        assert index.at("g", 50) is None
        assert index.at("g", -1) is None

    def test_range_slices(self, index):
        entries = [(f"m{i:03d}", sk(i)) for i in range(30)]
        index.add_many("g", entries)
        ordered = newest_first(entries)
        assert index.range("g", 5, 12) == ordered[5:12]
        assert index.range("g", 25, 40) == ordered[25:]
        assert index.range("g", 12, 5) == []

    def test_add_is_idempotent(self, index):
        index.add_many("g", [("a", sk(1)), ("b", sk(2))])
        index.add_many("g", [("a", sk(1)), ("b", sk(2))])
        assert index.count("g") == 2
        assert index.range("g", 0, 10) == [("b", sk(2)), ("a", sk(1))]

    def test_readding_with_new_sort_key_moves_member(self, index):
        index.add_many("g", [("a", sk(1)), ("b", sk(2)), ("c", sk(3))])
        index.add_many("g", [("a", sk(9))])
        assert index.count("g") == 3
        assert index.range("g", 0, 10) == [("a", sk(9)), ("c", sk(3)), ("b", sk(2))]

    def test_same_member_twice_in_one_call_keeps_the_last(self, index):
        index.add_many("g", [("a", sk(1)), ("a", sk(7))])
        assert index.range("g", 0, 10) == [("a", sk(7))]
        assert index.count("g") == 1

    def test_remove_is_idempotent(self, index):
        index.add_many("g", [("a", sk(1)), ("b", sk(2))])
        index.remove_many("g", ["a", "missing"])
        index.remove_many("g", ["a"])
        assert index.count("g") == 1
        assert index.range("g", 0, 10) == [("b", sk(2))]

    def test_groups_are_separate(self, index):
        index.add_many("g1", [("a", sk(1))])
        index.add_many("g2", [("a", sk(2)), ("b", sk(3))])
        index.remove_many("g1", ["b"])
        assert index.count_many(["g1", "g2", "g3"]) == {"g1": 1, "g2": 2, "g3": 0}
        assert index.at("g1", 0) == ("a", sk(1))

    def test_replace(self, index):
        index.add_many("g", [("a", sk(1)), ("b", sk(2))])
        index.replace("g", [("c", sk(3)), ("d", sk(4))])
        assert index.range("g", 0, 10) == [("d", sk(4)), ("c", sk(3))]
        assert index.count("g") == 2
        index.replace("g", [])
        assert index.count("g") == 0

    def test_apply_mixed_ops_in_order(self, index):
        index.add_many("g", [("a", sk(1)), ("b", sk(2))])
        index.apply([
            Add("g", "c", sk(3)), Remove("g", "a"), Add("g", "a", sk(5)),  # removed, then re-added
            Add("g2", "x", sk(1)), Remove("g2", "x"),  # added, then removed
            Remove("g", "b"), Add("h", "b", sk(2)),  # moved to another group
        ])
        assert index.range("g", 0, 10) == [("a", sk(5)), ("c", sk(3))]
        assert index.count("g2") == 0
        assert index.range("h", 0, 10) == [("b", sk(2))]

    def test_unicode_and_long_group_names(self, index):
        long_sku = "S" * 100
        unicode_sku = "Café-茶-🫖"
        index.add_many(long_sku, [("a", sk(1))])
        index.add_many(unicode_sku, [("ü-member", sk(2))])
        assert index.at(long_sku, 0) == ("a", sk(1))
        assert index.at(unicode_sku, 0) == ("ü-member", sk(2))
        assert set(index.groups()) >= {long_sku, unicode_sku}

    def test_thousands_of_groups(self, index):
        index.apply([Add(f"group-{g}", f"m{i}", sk(i)) for g in range(2000) for i in range(2)])
        counts = index.count_many([f"group-{g}" for g in range(2000)])
        assert set(counts.values()) == {2}
        assert index.at("group-1999", 1) == ("m0", sk(0))

    def test_random_operations_match_a_sorted_list(self, index):
        rng = random.Random(7)
        model: dict[str, str] = {}
        for _ in range(300):
            member = f"m{rng.randrange(60)}"
            if rng.random() < 0.7:
                model[member] = sk(rng.randrange(40))  # few distinct sort keys: many ties
                index.add_many("g", [(member, model[member])])
            else:
                model.pop(member, None)
                index.remove_many("g", [member])
        expected = newest_first(model.items())
        assert index.count("g") == len(expected)
        assert index.range("g", 0, 1000) == expected
        for rank in (0, len(expected) // 2, len(expected) - 1):
            assert index.at("g", rank) == expected[rank]

    def test_replace_is_atomic_for_a_concurrent_reader(self, index):
        old = [(f"old{i}", sk(i)) for i in range(300)]
        new = [(f"new{i}", sk(i)) for i in range(400)]
        index.replace("g", old)

        def writer():
            for _ in range(3):
                index.replace("g", new)
                index.replace("g", old)

        seen, counts = read_while_writing(index, writer, lambda: index.count("g"))
        assert seen and seen <= {(300, frozenset({"old"})), (400, frozenset({"new"}))}
        assert counts <= {300, 400}

    def test_apply_is_atomic_for_a_concurrent_reader(self, index):
        old = [Add("g", f"old{i}", sk(i)) for i in range(200)]
        new = [Add("g", f"new{i}", sk(i)) for i in range(200)] + [Add("h", f"h{i}", sk(i)) for i in range(50)]
        undo_old = [Remove("g", op.member) for op in old]
        undo_new = [Remove(op.group, op.member) for op in new]
        index.apply(old)

        def writer():
            for _ in range(3):
                index.apply(undo_old + new)  # one batch: the whole group swapped, and h filled
                index.apply(undo_new + old)

        seen, counts = read_while_writing(index, writer, lambda: tuple(index.count_many(["g", "h"]).values()))
        assert seen and seen <= {(200, frozenset({"old"})), (200, frozenset({"new"}))}
        assert counts <= {(200, 0), (200, 50)}

    def test_ties_order_by_code_point_like_dynamodb(self, index):
        """DynamoDB orders strings by their UTF-8 bytes, i.e. by code point: never by locale."""
        members = ["B", "a", "_", "a-c", "ab", "A0", "É", "z", "Z", "0", "~", "ß", "茶", "🫖"]
        index.add_many("g", [(member, sk(1)) for member in members])
        assert [member for member, _ in index.range("g", 0, 100)] == sorted(members, reverse=True)

    def test_at_far_past_the_end(self, index):
        index.add_many("g", [("a", sk(1))])
        assert index.at("g", 1) is None
        assert index.at("g", 10**9) is None
        assert index.range("g", 10**9, 10**9 + 5) == []
        assert index.range("g", -5, 1) == [("a", sk(1))]

    def test_replace_keeps_the_last_of_a_repeated_member(self, index):
        index.replace("g", [("a", sk(1)), ("b", sk(2)), ("a", sk(3))])
        assert index.range("g", 0, 10) == [("a", sk(3)), ("b", sk(2))]
        assert index.count("g") == 2

    def test_replace_reads_a_stream_once_across_chunks(self, index):
        """rebuild_index hands replace() a generator, newest first, longer than any backend's chunk;
        a member repeated in a later chunk keeps its last sort key."""
        read = []

        def stream():
            for n in range(4999, -1, -1):
                read.append(n)
                yield f"m{n:05d}", sk(n)
            yield "m00000", sk(6000)

        index.add_many("g", [("old", sk(1))])
        index.replace("g", stream())
        assert len(read) == 5000 and index.count("g") == 5000
        assert index.at("g", 0) == ("m00000", sk(6000))
        assert index.range("g", 4998, 5000) == [("m00002", sk(2)), ("m00001", sk(1))]
        assert not index.is_empty()
        index.replace("g", iter(()))
        assert index.count("g") == 0 and index.is_empty()

    def test_groups_lists_the_non_empty_groups(self, index):
        index.add_many("g1", [("a", sk(1))])
        index.add_many("g2", [("a", sk(1)), ("b", sk(2))])
        index.replace("g3", [("a", sk(1))])
        index.remove_many("g2", ["a", "b"])
        index.replace("g3", [])
        index.add_many("g4", [])
        assert index.groups() == ["g1"]
        index.apply([Add("g2", "c", sk(3))])
        assert index.groups() == ["g1", "g2"]

    def test_clear_empties_every_group(self, index):
        index.add_many("g1", [("a", sk(1))])
        index.replace("g2", [("a", sk(1))])
        index.clear()
        assert index.groups() == []
        assert index.count_many(["g1", "g2"]) == {"g1": 0, "g2": 0}
        index.add_many("g1", [("b", sk(2))])
        assert index.range("g1", 0, 10) == [("b", sk(2))]

    # --- count_newer: the rank an entry has or would have (filtered pages, issue 9) -------------
    def test_count_newer_in_an_empty_or_unknown_group(self, index):
        assert index.count_newer("nothing-here", sk(5)) == 0
        assert index.count_newer("nothing-here", sk(5), "m") == 0
        assert index.count_newer_many(["nothing-here", "nor-here"], sk(5), "m") == {"nothing-here": 0, "nor-here": 0}

    def test_count_newer_is_the_rank_of_present_and_absent_keys(self, index):
        entries = [("m1", sk(5)), ("m3", sk(5)), ("m2", sk(5)), ("old", sk(1)), ("new", sk(9))]
        index.add_many("g", entries)
        ordered = newest_first(entries)
        for rank, (member, sort_key) in enumerate(ordered):
            assert index.count_newer("g", sort_key, member) == rank
        assert index.count_newer("g", sk(5)) == 1  # member None: only strictly greater sort keys
        assert index.count_newer("g", sk(5), "m4") == 1  # absent, before the whole run of ties
        assert index.count_newer("g", sk(5), "m25") == 2  # absent, inside the run (m3 > m25 > m2)
        assert index.count_newer("g", sk(5), "") == 4  # absent, after the whole run
        assert index.count_newer("g", sk(99)) == 0
        assert index.count_newer("g", sk(0)) == 5
        assert index.count_newer("g", sk(3), "zzz") == 4

    def test_count_newer_many_counts_each_group(self, index):
        index.add_many("a", [("a1", sk(1)), ("a5", sk(5)), ("a7", sk(7))])
        index.add_many("b", [("b5", sk(5)), ("b6", sk(6))])
        assert index.count_newer_many(["a", "b", "c"], sk(5), "b5") == {"a": 1, "b": 1, "c": 0}
        assert index.count_newer_many(["a", "b"], sk(5)) == {"a": 1, "b": 1}
        assert index.count_newer_many(["a", "b"], sk(5), "a5") == {"a": 1, "b": 2}

    def test_count_newer_matches_a_sorted_list(self, index):
        rng = random.Random(9)
        entries = {f"m{rng.randrange(10**6):06d}": sk(rng.randrange(1, 50)) for _ in range(400)}
        index.add_many("g", list(entries.items()))
        ordered = newest_first(entries.items())
        keys = [(order, member) for member, order in entries.items()]
        for _ in range(60):
            sort_key = sk(rng.randrange(0, 52)) if rng.random() < 0.5 else rng.choice(keys)[0]
            member = rng.choice([None, f"m{rng.randrange(10**6):06d}", rng.choice(keys)[1]])
            if member is None:
                expected = sum(1 for _, s in ordered if s > sort_key)
            else:
                expected = sum(1 for m, s in ordered if (s, m) > (sort_key, member))
            assert index.count_newer("g", sort_key, member) == expected, (sort_key, member)

    def test_count_newer_inside_a_long_run_of_ties(self, index):
        """More equal sort keys than a backend may read at once (Redis reads 256)."""
        members = [f"m{i:04d}" for i in range(700)]
        index.add_many("g", [(member, sk(5)) for member in members] + [("newer", sk(6)), ("older", sk(4))])
        for probe in ("m0000", "m0123", "m0350", "m0699", "m0350x", "a", "z"):
            expected = 1 + sum(1 for member in members if member > probe)
            assert index.count_newer("g", sk(5), probe) == expected, probe
        assert index.count_newer_many(["g", "h"], sk(5), "m0500") == {"g": 1 + 199, "h": 0}

    # --- conditional removes (the stream's REMOVE of item (PK, SK) must not delete (PK, SK')) ----
    def test_conditional_remove_only_while_the_sort_key_matches(self, index):
        index.add_many("g", [("a", sk(2)), ("b", sk(3))])
        index.remove_entries("g", [("a", sk(1)), ("b", sk(3)), ("missing", sk(1))])
        assert index.range("g", 0, 10) == [("a", sk(2))]
        assert index.count("g") == 1
        index.remove_entries("g", [("a", None)])
        assert index.count("g") == 0

    def test_apply_folds_conditional_removes(self, index):
        index.add_many("g", [("a", sk(1)), ("b", sk(1)), ("c", sk(1)), ("d", sk(4))])
        index.apply([
            Add("g", "a", sk(2)), Remove("g", "a", sk(1)),  # a new SK's insert applied before the old SK's remove
            Remove("g", "b", sk(1)), Add("g", "b", sk(2)),  # SK change in order
            Add("g", "c", sk(5)), Remove("g", "c", sk(5)),  # added, then removed
            Remove("g", "d", sk(3)), Remove("g", "d", sk(4)),  # two conditional removes: either matches
            Remove("g", "e", sk(3)),  # nothing there
        ])
        assert index.range("g", 0, 10) == [("b", sk(2)), ("a", sk(2))]
        assert index.count("g") == 2
