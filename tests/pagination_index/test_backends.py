"""The index contract, proven on every backend over its real store."""
import random
import re
import threading
import uuid
from io import StringIO

import pytest
import redis
from django.core.management import CommandError, call_command
from django.db import connections
from redis.cluster import RedisCluster
from redis.crc import key_slot

from pagination_index.sortkeys import micros_sort_key
from pagination_index.backends.base import Add, BaseIndex, IndexUnavailable, Remove, newest_first
from pagination_index.backends.dynamodb import DynamoDBIndex
from pagination_index.backends.files import FileIndex
from pagination_index.backends.redis import (TIE_FETCH, RedisIndex, cluster_location, encode_member, group_of_key,
                                             sort_key_score)
from pagination_index.backends.relational import RelationalIndex
from pagination_index.testing import IndexContract, read_while_writing, sk
from tests.config import index_config


class RelationalContract(IndexContract):
    """The relational backend's extras. Its concurrent tests run outside a test transaction, so the
    reader thread's own connection sees what the writer commits."""

    @pytest.mark.django_db(transaction=True, databases="__all__")
    def test_replace_is_atomic_for_a_concurrent_reader(self, index):
        super().test_replace_is_atomic_for_a_concurrent_reader(index)

    @pytest.mark.django_db(transaction=True, databases="__all__")
    def test_apply_is_atomic_for_a_concurrent_reader(self, index):
        super().test_apply_is_atomic_for_a_concurrent_reader(index)

    def test_counts_are_kept_without_scanning(self, index, django_assert_max_num_queries):
        index.add_many("g", [(f"m{i}", sk(i)) for i in range(100)])
        with django_assert_max_num_queries(1, connection=connections[index.database_alias]):
            assert index.count("g") == 100


@pytest.mark.django_db
class TestRelationalIndexOnSQLite(RelationalContract):
    @pytest.fixture
    def index(self):
        return RelationalIndex({})


class EssentialsOnly(RelationalIndex):
    count_newer = BaseIndex.count_newer
    count_newer_many = BaseIndex.count_newer_many


class TestBaseIndexDefaults(TestRelationalIndexOnSQLite):
    """The base class's slow-but-correct defaults (count_newer by binary search over at()), proven
    through a backend whose own overrides are taken away."""

    @pytest.fixture
    def index(self):
        return EssentialsOnly({})


@pytest.mark.django_db(databases="__all__")
class TestRelationalIndexOnPostgreSQL(RelationalContract):
    @pytest.fixture
    def index(self, postgres_database):
        return RelationalIndex({"DATABASE": postgres_database})

    def test_rank_index_and_member_lookup_are_bytewise_and_covering(self, index):
        """Collation "C" (DynamoDB's byte order) on the ordered columns, and the upsert's lookup
        answered from the unique index alone (sort_key INCLUDEd)."""
        with connections[index.database_alias].cursor() as cursor:
            cursor.execute(
                "SELECT attname, collname FROM pg_attribute JOIN pg_collation ON attcollation = pg_collation.oid "
                "WHERE attrelid = 'pagination_index_indexentry'::regclass AND attname IN ('member', 'sort_key')"
            )
            assert dict(cursor.fetchall()) == {"member": "C", "sort_key": "C"}
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'pagination_index_entry_member'")
            assert cursor.fetchone()[0].endswith('("group", member) INCLUDE (sort_key)')

    def test_block_floors_are_bytewise_like_the_keys_they_are_compared_with(self, index):
        """A block is found by comparing its floor with an entry's key: in one collation, so the
        blocks' index serves the comparison and orders floors as the entries are ordered."""
        with connections[index.database_alias].cursor() as cursor:
            cursor.execute(
                "SELECT attname, collname FROM pg_attribute JOIN pg_collation ON attcollation = pg_collation.oid "
                "WHERE attrelid = 'pagination_index_indexblock'::regclass"
                " AND attname IN ('floor_sort_key', 'floor_member')"
            )
            assert dict(cursor.fetchall()) == {"floor_sort_key": "C", "floor_member": "C"}


class RedisContract(IndexContract):
    """The Redis backend's extras, on one Redis and on a cluster alike (`index.client` is either)."""

    def test_score_is_the_sort_key_in_integer_microseconds(self, index):
        index.add_many("g", [("a", "2021-08-25T13:00:00.123456Z")])
        assert index.client.zscore(index.key("g"), "a") == 1629896400123456

    @pytest.mark.parametrize("sort_key", [
        "2021-08-25T13:00:00Z", "2021-08-25T13:00:00.123Z", "2021-08-25 13:00:00.000000Z",
        "2021-02-30T00:00:00.000000Z", "2255-06-05T23:47:34.740993Z", "x",
    ])
    def test_sort_keys_it_cannot_hold_exactly_are_refused(self, index, sort_key):
        with pytest.raises(ValueError):
            index.add_many("g", [("a", sort_key)])
        assert index.count("g") == 0

    def test_replace_leaves_no_temporary_key_and_no_expiry(self, index):
        index.replace("g", [(f"m{i}", sk(i)) for i in range(12_000)])  # more than one ZADD chunk
        assert index.count("g") == 12_000
        assert index.client.ttl(index.key("g")) == -1
        assert list(index._scan("tmp:*")) == []

    def test_clear_deletes_only_its_own_prefix(self, index):
        client = index.client
        neighbour = RedisIndex(dict(index.options, KEY_PREFIX=index.prefix[:-1] + "-other:"))
        try:
            neighbour.add_many("g", [("n", sk(1))])
            client.set(index.prefix[:-1], "not the index's")  # the prefix without its colon
            index.add_many("g", [("a", sk(1))])
            index.clear()
            assert neighbour.at("g", 0) == ("n", sk(1))
            assert client.get(index.prefix[:-1]) == b"not the index's"
        finally:
            neighbour.clear()
            client.delete(index.prefix[:-1])

    def test_a_product_and_its_rating_groups_share_a_hash_slot(self, index):
        keys = [index.key(group) for group in ("KETTLE-2000", "KETTLE-2000/1", "KETTLE-2000/5")]
        assert keys == [f"{index.prefix}{{KETTLE-2000}}", f"{index.prefix}{{KETTLE-2000}}/1",
                        f"{index.prefix}{{KETTLE-2000}}/5"]
        assert len({key_slot(key.encode()) for key in keys}) == 1

    @pytest.mark.parametrize("group", ["SKU", "SKU/4", "a{b}c/4", "}x", "", "/5", "Café-茶-🫖/3"])
    def test_group_names_come_back_from_their_keys(self, index, group):
        assert group_of_key(index.key(group), index.prefix) == group
        index.add_many(group, [("a", sk(1))])
        assert index.groups() == [group]

    def test_groups_forget_emptied_groups_and_skip_temporary_keys(self, index):
        index.add_many("g1", [("a", sk(1))])
        index.add_many("g2", [("a", sk(1))])
        index.remove_many("g2", ["a"])
        index.client.zadd(f"{index.prefix}tmp:{{g3}}:0", {"a": 1})  # a replace() in progress
        assert index.groups() == ["g1"]


    # --- members stored in binary form (issue 29) -------------------------------------------------
    @pytest.fixture
    def raw(self, index):
        """A plain redis-py client of the index's server or cluster: what is really stored."""
        location, cluster = cluster_location(index.options["LOCATION"])
        client = RedisCluster.from_url(location) if cluster else redis.Redis.from_url(location)
        yield client
        client.close()

    def test_a_uuid_member_is_stored_as_its_16_bytes(self, index, raw):
        member = uuid.uuid4().hex
        index.add_many("g", [(member, sk(1))])
        index.replace("h", [(member, sk(1))])
        for group in ("g", "h"):
            assert raw.zrange(index.key(group), 0, -1) == [bytes.fromhex(member)]
            assert index.at(group, 0) == (member, sk(1))

    @pytest.mark.parametrize("member, stored", [
        ("0123456789abcdef0123456789abcdef", bytes.fromhex("0123456789abcdef0123456789abcdef")),
        ("0123456789ABCDEF0123456789ABCDEF", b"0123456789ABCDEF0123456789ABCDEF"),  # not lowercase: text
        ("0123456789abcdef0123456789abcde", b"0123456789abcdef0123456789abcde"),
        ("0123456789abcdef0123456789abcdef0", b"0123456789abcdef0123456789abcdef0"),
        ("sixteen-bytes-ab", b"sixteen-bytes-ab\x00"),  # 16 bytes of text: never mistaken for a uuid
        ("éééééééé", "éééééééé".encode() + b"\x00"),  # 8 characters, 16 bytes
        ("ends-with-nul\x00", b"ends-with-nul\x00\x00"),
        ("\x00", b"\x00\x00"),
        ("", b""),
        ("a", b"a"),
        ("Café-茶-🫖", "Café-茶-🫖".encode()),
    ])
    def test_members_round_trip_through_their_stored_form(self, index, raw, member, stored):
        assert encode_member(member) == stored
        index.add_many("g", [(member, sk(1))])
        index.replace("h", [(member, sk(2))])
        assert raw.zrange(index.key("g"), 0, -1) == raw.zrange(index.key("h"), 0, -1) == [stored]
        assert index.range("g", 0, 5) == [(member, sk(1))] and index.at("h", 0) == (member, sk(2))
        assert index.count_newer("g", sk(1), member) == 0
        index.remove_entries("g", [(member, sk(1))])
        index.remove_many("h", [member])
        assert index.count_many(["g", "h"]) == {"g": 0, "h": 0}

    def test_ties_are_ordered_by_stored_bytes(self, index):
        """Uuids among themselves in hex order, texts in text order; a uuid against a text (which only
        hand-made data mixes) by their stored bytes, and count_newer agrees with that order."""
        uuids = sorted(uuid.uuid4().hex for _ in range(20))
        texts = ["b", "a", "sixteen-bytes-ab", "sixteen-bytes-ac", "z\x00", "z", "茶", ""]
        index.add_many("u", [(member, sk(5)) for member in uuids])
        index.add_many("t", [(member, sk(5)) for member in texts])
        high = "ff" + "0" * 30  # before "g" as text, after it as bytes (b"\xff..." > b"g")
        mixed = uuids[:5] + texts + [high, "g"]
        index.add_many("m", [(member, sk(5)) for member in mixed])
        assert [member for member, _ in index.range("u", 0, 100)] == sorted(uuids, reverse=True)
        assert [member for member, _ in index.range("t", 0, 100)] == sorted(texts, reverse=True)
        stored_order = sorted(mixed, key=encode_member, reverse=True)
        assert [member for member, _ in index.range("m", 0, 100)] == stored_order
        assert stored_order.index(high) < stored_order.index("g")
        for rank, member in enumerate(stored_order):
            assert index.count_newer("m", sk(5), member) == rank

    @pytest.mark.parametrize("run", [40, TIE_FETCH + 300])
    def test_count_newer_inside_a_run_of_tied_uuids(self, index, run):
        members = sorted((uuid.uuid4().hex for _ in range(run)), reverse=True)
        index.replace("g", [(member, sk(5)) for member in members]
                      + [(uuid.uuid4().hex, sk(6)), (uuid.uuid4().hex, sk(4))])
        for rank in (0, 1, run // 2, run - 1):
            assert index.count_newer("g", sk(5), members[rank]) == 1 + rank
        for probe in (uuid.uuid4().hex for _ in range(10)):  # absent members: where they would go
            assert index.count_newer("g", sk(5), probe) == 1 + sum(1 for member in members if member > probe)
        assert index.count_newer("g", sk(5), "0" * 32) == 1 + run
        assert index.count_newer("g", sk(5), "f" * 32) == 1

    def test_writes_drop_the_text_form_of_older_releases(self, index, raw):
        """An index written before the binary form holds uuids as 32-byte text: they read back the
        same, removes (plain and conditional) take them, and an add moves rather than doubles them."""
        kept, removed, moved, conditional, other = (uuid.uuid4().hex for _ in range(5))
        raw.zadd(index.key("g"), {member: sort_key_score(sk(n)) for n, member in
                                  enumerate((kept, removed, moved, conditional, other), start=1)})
        assert index.range("g", 0, 10) == [(other, sk(5)), (conditional, sk(4)), (moved, sk(3)),
                                           (removed, sk(2)), (kept, sk(1))]
        index.apply([Remove("g", removed), Add("g", moved, sk(9)), Remove("g", conditional, sk(4)),
                     Remove("g", other, sk(1))])  # other: the SK no longer matches, it stays
        assert index.range("g", 0, 10) == [(moved, sk(9)), (other, sk(5)), (kept, sk(1))]
        assert sorted(raw.zrange(index.key("g"), 0, -1)) == sorted([bytes.fromhex(moved), other.encode(), kept.encode()])
        index.remove_entries("g", [(other, sk(5))])
        index.remove_many("g", [kept])
        assert index.range("g", 0, 10) == [(moved, sk(9))]

    def test_check_index_flags_an_index_in_the_text_form(self, index, raw, settings):
        settings.PAGINATION_INDEX = index_config(**{"BACKEND": "pagination_index.backends.redis.RedisIndex", "OPTIONS": index.options})
        index.replace("new", [(uuid.uuid4().hex, sk(1))])
        assert index.check_format() == []
        call_command("check_index", stdout=StringIO(), stderr=StringIO())
        raw.zadd(index.key("old"), {uuid.uuid4().hex: sort_key_score(sk(1))})
        out = StringIO()
        with pytest.raises(CommandError, match="rebuild_index"):
            call_command("check_index", stdout=out, stderr=StringIO())
        assert "1 of 2 sampled groups hold members in the text form" in out.getvalue()
        assert "rebuild_index" in out.getvalue()
        index.replace("old", index.range("old", 0, 10))  # what rebuild_index does for the group
        call_command("check_index", stdout=StringIO(), stderr=StringIO())


class TestRedisIndex(RedisContract):
    @pytest.fixture
    def index(self, redis_index_options):
        return RedisIndex(redis_index_options)

    @pytest.mark.parametrize("sort_key, score", [
        ("1970-01-01T00:00:00.000000Z", 0),
        ("1969-12-31T23:59:59.999999Z", -1),
        ("2021-08-25T13:00:00.123456Z", 1629896400123456),
        ("2255-06-05T23:47:34.740992Z", 2**53),
        ("1684-07-28T00:12:25.259008Z", -(2**53)),
    ])
    def test_sort_key_round_trips_exactly(self, sort_key, score):
        assert sort_key_score(sort_key) == score
        assert micros_sort_key(float(score)) == sort_key


class TestRedisClusterIndex(RedisContract):
    """The same contract on a real 3-primary Redis Cluster: groups of many products land on every
    node, so each multi-group test crosses slots and nodes."""

    @pytest.fixture
    def index(self, redis_cluster_index_options):
        index = RedisIndex(redis_cluster_index_options)
        yield index
        index.close()

    def test_products_spread_over_every_primary(self, index, redis_cluster):
        index.apply([Add(f"P{n}", "m", sk(1)) for n in range(30)])
        owners = {redis_cluster.primary_port_of(index.key(f"P{n}")) for n in range(30)}
        assert len(owners) == 3
        assert index.groups() == sorted(f"P{n}" for n in range(30))

    def test_reads_on_a_stale_slot_map_follow_the_redirect(self, index):
        """Reads go straight to the slot's primary as the client's map says; when the map is stale
        (a slot moved, a replica promoted) the node it names answers MOVED, and the read is made
        again through the cluster client, which follows it and refreshes the map."""
        from redis.crc import key_slot

        index.apply([Add("P", f"m{n}", sk(n)) for n in range(5)])
        key = index.key("P")
        slot = key_slot(key.encode())
        manager = index.client.nodes_manager
        right = manager.slots_cache[slot][0]
        wrong = next(node for node in manager.nodes_cache.values() if node.server_type == "primary" and node != right)
        manager.slots_cache[slot] = [wrong]  # what a client that missed a resharding holds
        assert index.client.get_node_from_key(key) is wrong
        assert index.count("P") == 5
        assert index.at("P", 1) == ("m3", sk(3))
        assert index.range("P", 0, 2) == [("m4", sk(4)), ("m3", sk(3))]
        assert index.client.get_node_from_key(key).name == right.name  # the map was refreshed

    def test_a_failed_batch_across_products_is_unavailable_and_replays(self, index):
        """A batch in which one product's write fails (a wrong type at its key) raises IndexUnavailable,
        whatever the other products' transactions committed; replaying it (as the stream does,
        its checkpoint not having moved) ends where one clean apply would."""
        index.client.set(index.key("broken"), "not a sorted set")
        ops = [Add("ok", "a", sk(1)), Add("ok/5", "a", sk(1)), Add("broken", "a", sk(1))]
        with pytest.raises(IndexUnavailable):
            index.apply(ops)
        index.client.delete(index.key("broken"))
        index.apply(ops)
        assert index.count_many(["ok", "ok/5", "broken"]) == {"ok": 1, "ok/5": 1, "broken": 1}


class Calls:
    """What a DynamoDBIndex asks of DynamoDB: each call's operation, and the keys of the items each
    TransactWriteItems writes (read from the request, as DynamoDB would bill it)."""

    def __init__(self, index):
        self.operations, self.written = [], []
        for client in (index.client, index.writer):  # reads fail fast, writes are patient: both count
            client.meta.events.register("provide-client-params.dynamodb.*", self.note)

    def note(self, params, model, **_):
        self.operations.append(model.name)
        if model.name == "TransactWriteItems":
            for action in params["TransactItems"]:
                body = next(iter(action.values()))
                key = body.get("Key") or body["Item"]
                self.written.append((key["g"]["S"], key["p"]["S"]))

    def clear(self):
        self.operations.clear()
        self.written.clear()

    def pages_written(self):
        return sorted(int(p.split(":")[1]) for _, p in self.written if p.startswith("p"))


def page_items(index, group="g"):
    items = index.client.query(TableName=index.table, KeyConditionExpression="g = :g",
                               ExpressionAttributeValues={":g": {"S": group}}, ConsistentRead=True)["Items"]
    return {int(item["p"]["S"].split(":")[1]): index._page_entries(item) for item in items if item["p"]["S"].startswith("p")}


def model_check(index, model: dict, group="g"):
    """The group equals the model in full, at single ranks, by count_newer, and in its own structures."""
    expected = newest_first(model.items())
    assert index.count(group) == len(expected)
    assert index.range(group, 0, len(expected) + 5) == expected
    for rank in {0, len(expected) // 3, len(expected) // 2, len(expected) - 1} - {-1}:
        assert index.at(group, rank) == expected[rank]
        assert index.range(group, rank, rank + 4) == expected[rank:rank + 4]
        assert index.count_newer(group, expected[rank][1], expected[rank][0]) == rank
    assert index.check_integrity(group) == []
    assert index.check_order(group, expected) == []


class TestDynamoDBIndex(IndexContract):
    """Pages of 3 entries (dynamodb_index_options), so the contract's groups span several items."""

    @pytest.fixture
    def index(self, dynamodb_index_options):
        return DynamoDBIndex(dynamodb_index_options)

    def test_pages_hold_the_oldest_entries_first_and_a_stats_item(self, index):
        index.add_many("g", [(f"m{n}", sk(n)) for n in range(7)])
        assert page_items(index) == {0: [("m0", sk(0)), ("m1", sk(1)), ("m2", sk(2))],
                                     1: [("m3", sk(3)), ("m4", sk(4)), ("m5", sk(5))], 2: [("m6", sk(6))]}
        index.remove_many("g", ["m6"])
        assert index.groups() == ["g"] and index.count("g") == 6 and index.at("g", 0) == ("m5", sk(5))
        assert sorted(page_items(index)) == [0, 1]

    def test_an_append_reads_and_writes_a_constant_number_of_items(self, index):
        """No read of the whole group: the stats item, the member item, the newest page item."""
        index.replace("g", [(f"m{n:03d}", sk(n)) for n in range(300)])  # 100 page items
        calls = Calls(index)
        for n in range(300, 306):
            calls.clear()
            index.add_many("g", [(f"m{n:03d}", sk(n))])
            assert "Query" not in calls.operations and "Scan" not in calls.operations
            assert len(calls.operations) == 4  # stats, member item, newest page, the transaction
            assert len(calls.written) == 3  # stats, member item, the newest page item (or a new one)
            assert calls.pages_written() == [n // 3]
        model_check(index, {f"m{n:03d}": sk(n) for n in range(306)})

    def test_a_middle_insert_or_delete_shifts_only_the_page_items_after_it(self, index):
        model = {f"m{n:03d}": sk(n * 2) for n in range(30)}  # 10 page items
        index.replace("g", list(model.items()))
        calls = Calls(index)
        index.add_many("g", [("x", sk(41))])  # between positions 20 and 21: page item 7
        model["x"] = sk(41)
        assert calls.pages_written() == [7, 8, 9, 10]  # 9 was full: its newest entry opens page 10
        assert "Query" not in calls.operations
        calls.clear()
        index.remove_many("g", ["m026"])  # position 27: page item 9
        del model["m026"]
        assert calls.pages_written() == [9, 10]
        calls.clear()
        index.remove_entries("g", [("m026", sk(52)), ("m001", sk(3))])  # neither matches: nothing written
        assert calls.written == []
        model_check(index, model)

    def test_redelivered_batches_write_nothing(self, index):
        ops = [Add("g", f"m{n}", sk(n)) for n in range(10)] + [Remove("g", "m3", sk(3)), Add("h", "a", sk(1))]
        index.apply(ops)
        calls = Calls(index)
        index.apply(ops)
        assert "TransactWriteItems" not in calls.operations
        model_check(index, {f"m{n}": sk(n) for n in range(10) if n != 3})

    def test_a_long_shift_marks_the_group_and_pages_stay_exact_until_the_remark(self, dynamodb_index_options):
        """MAX_SHIFT 2: every insert or delete more than 2 page items from the newest end changes
        one page item and a delta in the stats item. Every read stays exact meanwhile; remark()
        then shifts the entries back into exact page items, 3 page items per transaction."""
        index = DynamoDBIndex(dict(dynamodb_index_options, MAX_SHIFT=2))
        rng = random.Random(11)
        model = {f"m{n:03d}": sk(n * 10) for n in range(60)}  # 20 page items
        index.replace("g", list(model.items()))
        calls = Calls(index)
        for step in range(40):
            calls.clear()
            if rng.random() < 0.5:
                member, key = f"x{step:02d}", sk(rng.randrange(0, 450))
                model[member] = key
                index.add_many("g", [(member, key)])
            else:
                member = rng.choice(sorted(model))
                del model[member]
                index.remove_many("g", [member])
            assert len(calls.pages_written()) <= 3  # the page item changed, or a shift of at most 2+1
            if step % 8 == 7:
                model_check(index, model)
        assert index.marked_groups() == ["g"]
        stats = index._stats("g")
        assert stats.marked and len(stats.deltas) > 3
        model_check(index, model)
        calls.clear()
        steps = 0
        while index.marked_groups():
            steps += index.remark(budget=1)
            model_check(index, model)  # exact after every step
            assert len(calls.pages_written()) <= 3 + 1
            calls.clear()
        assert steps >= 2 and not index._stats("g").marked
        pages = page_items(index)
        assert [len(pages[p]) for p in sorted(pages)] == [3] * (len(model) // 3) + ([len(model) % 3] if len(model) % 3 else [])

    def test_page_items_stay_under_their_byte_bound_whatever_the_batch(self, dynamodb_index_options, monkeypatch):
        """Issue 42 (make run): batches of random inserts into a group far longer than MAX_SHIFT, the
        re-mark between some of them. Marked pages grow, and the re-mark used to pile what a whole
        run of pages grew by onto one page item and roll it on towards the newest end, until DynamoDB
        refused it (over 400 KB: 5,828 entries on one page of the demo's product). With the bound
        made small here (PAGE_ITEM_BYTES, 400 KB's stand-in), every page item stays under it, the
        stats item lists a bounded number of marked pages, every read stays exact, and the group ends
        exact after the re-mark."""
        import pagination_index.backends.dynamodb as dynamodb

        bound = 40 * 30  # 40 entries of ~30 bytes: pages of 3
        monkeypatch.setattr(dynamodb, "PAGE_ITEM_BYTES", bound, raising=False)
        monkeypatch.setattr(dynamodb, "MARKED_PAGES", 8, raising=False)  # the stats item's `d`, bounded too
        index = DynamoDBIndex(dict(dynamodb_index_options, MAX_SHIFT=2))
        rng = random.Random(42)
        model = {}
        for batch in range(12):
            adds = [(f"m{batch:02d}{n:03d}", sk(rng.randrange(10**6))) for n in range(60)]
            model.update(adds)
            index.apply([Add("g", member, key) for member, key in adds])
            if batch % 3 == 2:
                index.remark(budget=5)
            sizes = [dynamodb.entries_bytes(entries) if hasattr(dynamodb, "entries_bytes")
                     else sum(len(m) + len(k) + 2 for m, k in entries) for entries in page_items(index).values()]
            assert max(sizes) <= bound, f"batch {batch}: a page item of {max(sizes)} bytes"
            # a write marks at most MARKED_PAGES; a re-mark step may leave its own window's pages marked
            assert len(index._stats("g").deltas) <= 8 + 90
        model_check(index, model)
        assert index.check_integrity("g") == []
        while index.marked_groups():
            index.remark(budget=10)
        model_check(index, model)
        assert not index._stats("g").marked

    def test_an_item_dynamodb_refuses_as_too_large_is_a_design_error_not_an_outage(self, index):
        """A ValidationException on the transaction (an item over 400 KB) is InvalidIndexWrite: sync_index
        must not wait it out as an outage and retry it forever."""
        from pagination_index.backends.dynamodb import InvalidIndexWrite

        with pytest.raises(InvalidIndexWrite, match="Item size has exceeded"):
            index.add_many("g", [("m", "9" * 410_000)])

    def test_two_appliers_on_one_group_at_once(self, dynamodb_index_options):
        """Two consumers (own clients) write one group concurrently: conditional transactions on
        the stats version make the loser re-read and retry; nothing is lost or doubled."""
        first, second = DynamoDBIndex(dynamodb_index_options), DynamoDBIndex(dynamodb_index_options)
        base = {f"b{n:03d}": sk(n * 3) for n in range(45)}
        first.replace("g", list(base.items()))
        errors = []

        def work(index, prefix, seed):
            rng = random.Random(seed)
            try:
                for n in range(25):
                    index.apply([Add("g", f"{prefix}{n:02d}", sk(rng.randrange(0, 200))),
                                 Remove("g", f"b{(n * 2 + seed) % 45:03d}")])
            except Exception as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(index, prefix, seed))
                   for index, prefix, seed in ((first, "p", 0), (second, "q", 1))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        model = dict(base)
        for prefix, seed in (("p", 0), ("q", 1)):
            rng = random.Random(seed)
            for n in range(25):
                model[f"{prefix}{n:02d}"] = sk(rng.randrange(0, 200))
                model.pop(f"b{(n * 2 + seed) % 45:03d}", None)
        model_check(first, model)

    def test_writes_and_reads_while_the_group_is_rewritten(self, dynamodb_index_options):
        """A rewrite (repair_group, replace) swaps the group's generation and deletes the old page
        items while another consumer plans a write and a reader binary-searches: both read again."""
        writer, rewriter = DynamoDBIndex(dynamodb_index_options), DynamoDBIndex(dynamodb_index_options)
        model = {f"b{n:03d}": sk(n * 3) for n in range(60)}
        writer.replace("g", list(model.items()))
        done, errors = threading.Event(), []

        def rewrite():  # a rewrite every 0.3 s or so: far more often than rebuilds and repairs come
            try:
                while not done.wait(0.3):
                    rewriter.repair_group("g")
                    rewriter.count_newer("g", sk(90))
            except Exception as exc:  # surfaced below
                errors.append(exc)

        thread = threading.Thread(target=rewrite)
        thread.start()
        try:
            for n in range(30):
                writer.apply([Add("g", f"a{n:02d}", sk(n * 5 + 1)), Remove("g", f"b{n * 2:03d}")])
                model[f"a{n:02d}"] = sk(n * 5 + 1)
                model.pop(f"b{n * 2:03d}")
        finally:
            done.set()
            thread.join()
        assert not errors
        model_check(writer, model)

    def test_verify_reports_each_drifted_page_item(self, index):
        from pagination_index.verify import group_drift

        entries = [(f"m{n:02d}", sk(n)) for n in range(12)]
        index.replace("g", entries)
        assert group_drift(index, "g", entries).ok
        stats = index._stats("g")
        index.client.put_item(TableName=index.table, Item=index._page_item(
            "g", stats.generation, 2, [("m06", sk(6)), ("m08", sk(8)), ("m07", sk(7))]))
        drift = group_drift(index, "g", entries)
        assert not drift.ok
        assert any(p.startswith("page item 2 (positions 6-8 from the oldest, ranks 3-5 newest first): 2 of 3")
                   for p in drift.problems), drift.problems
        assert any("page item 2: entries out of order" in p for p in drift.problems), drift.problems
        index.repair_group("g")
        assert group_drift(index, "g", entries).ok

    def test_an_unreachable_store_is_index_unavailable(self):
        index = DynamoDBIndex({"ENDPOINT_URL": "http://127.0.0.1:9", "TABLE": "t", "CONNECT_TIMEOUT": 0.2, "MAX_ATTEMPTS": 1})
        with pytest.raises(IndexUnavailable):
            index.count("g")

    def test_apply_is_atomic_for_a_concurrent_reader(self, index):
        """Atomic where one transaction holds the batch: up to STEP_CHANGES changes per group and 100
        items in all (the contract's 400 changes to one group are applied in steps: next test)."""
        old = [Add("g", f"old{i}", sk(i)) for i in range(20)]
        new = [Add("g", f"new{i}", sk(i)) for i in range(20)] + [Add("h", f"h{i}", sk(i)) for i in range(5)]
        undo_old = [Remove("g", op.member) for op in old]
        undo_new = [Remove(op.group, op.member) for op in new]
        index.apply(old)

        def writer():
            for _ in range(3):
                index.apply(undo_old + new)
                index.apply(undo_new + old)

        seen, counts = read_while_writing(index, writer, lambda: tuple(index.count_many(["g", "h"]).values()))
        assert seen and seen <= {(20, frozenset({"old"})), (20, frozenset({"new"}))}
        assert counts <= {(20, 0), (20, 5)}

    def test_a_large_batch_is_applied_in_bounded_steps_not_a_rewrite(self, index):
        """Issue 29: 250 appends and 40 removals to one group in one batch: transactions of at most 100
        items, each of at most STEP_CHANGES changes, and no new generation (no whole-group rewrite)."""
        model = {f"m{n:03d}": sk(n) for n in range(60)}
        index.replace("g", list(model.items()))
        generation = index._stats("g").generation
        transactions = []
        index.writer.meta.events.register(
            "provide-client-params.dynamodb.TransactWriteItems",
            lambda params, **_: transactions.append(len(params["TransactItems"])))
        ops = [Add("g", f"n{n:03d}", sk(100 + n)) for n in range(250)] + [Remove("g", f"m{n:03d}") for n in range(40)]
        index.apply(ops)
        model.update({f"n{n:03d}": sk(100 + n) for n in range(250)})
        for n in range(40):
            del model[f"m{n:03d}"]
        assert len(transactions) >= 4 and max(transactions) <= 100
        assert index._stats("g").generation == generation
        model_check(index, model)


class TestFileIndex(IndexContract):
    """Local storage, with a commit every 7 log changes so the contract's writes cross many commits
    and most reads merge a pending log with a generation."""

    @pytest.fixture
    def index(self, tmp_path):
        return FileIndex({"PATH": tmp_path / "index", "COMMIT_ENTRIES": 7})


class TestFileIndexUncommitted(IndexContract):
    """No commit ever runs on its own: every read merges the whole log with the generation."""

    @pytest.fixture
    def index(self, tmp_path):
        return FileIndex({"PATH": tmp_path / "index", "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 10**9})


class TestFileIndexOnS3(IndexContract):
    """Generations in S3 (moto's server, a real HTTP process), the log local; a commit every 7 changes."""

    @pytest.fixture
    def index(self, files_s3_options):
        return FileIndex(files_s3_options)

    def test_reads_are_ranged_gets_of_immutable_generations_named_by_a_manifest(self, index):
        index.replace("g", [(f"m{n:03d}", sk(n)) for n in range(100)])
        storage = index.storage
        keys = [item["Key"] for item in storage._list(storage.folder("g"))]
        names = sorted(key.rsplit("/", 1)[1] for key in keys)
        assert names[1] == "manifest" and re.fullmatch(r"gen-00000000000000000001-[0-9a-f]{16}", names[0])
        calls = []
        storage.client.meta.events.register("before-call.s3.GetObject", lambda params, **kw: calls.append(params))
        assert index.at("g", 42) == ("m057", sk(57))
        assert [call.get("headers", {}).get("Range") for call in calls][-1].startswith("bytes=")

    def test_an_unpublished_generation_never_blocks_a_commit_and_is_deleted(self, index):
        """A commit killed between its two PUTs (or botocore re-sending a PUT that had landed) leaves
        a generation object no manifest names. Generation names are never reused, so later commits
        publish anyway, and the next publish deletes the leftover (issue 42: it used to wedge the
        group with 412 on every commit)."""
        index.replace("g", [(f"m{n:02d}", sk(n)) for n in range(10)])
        storage = index.storage
        folder = storage.folder("g")
        leftovers = [f"{folder}gen-00000000000000000002", f"{folder}gen-00000000000000000002-00000000deadbeef"]
        for key in leftovers:
            storage._call("put_object", Key=key, Body=b"an upload its committer never published")
        index.add_many("g", [("new", sk(50))])
        assert index.commit("g")
        index.add_many("g", [("newer", sk(60))])
        assert index.commit("g")
        assert index.range("g", 0, 2) == [("newer", sk(60)), ("new", sk(50))] and index.count("g") == 12
        keys = {item["Key"] for item in storage._list(folder + "gen-")}
        assert not keys & set(leftovers)
        assert len(keys) == 2  # the current generation and the one before it

    def test_the_manifest_the_commit_was_built_on_is_the_arbiter(self, index):
        """Host A merged its log onto the generation its view read; host B published another since.
        A's publish is conditional on the manifest ETag of that view, so it loses (IndexUnavailable)
        and deletes its upload instead of overwriting B's generation with one built from an older one."""
        index.replace("g", [("a", sk(1))])
        index.add_many("g", [("b", sk(2))])
        assert index.count("g") == 2  # A's view: generation 1 (its manifest cached MANIFEST_SECONDS)
        elsewhere = FileIndex(dict(index.options, PATH=index.journal.root.parent / "other-host"))
        elsewhere.replace("g", [("c", sk(3)), ("a", sk(1))])
        with pytest.raises(IndexUnavailable, match="another committer published first"):
            index.commit("g")
        storage = index.storage
        assert storage._fetch_manifest("g")[1]["generation"] == 2
        keys = sorted(item["Key"].rsplit("/", 1)[1] for item in storage._list(storage.folder("g") + "gen-"))
        assert [key[:24] for key in keys] == ["gen-00000000000000000001", "gen-00000000000000000002"]
        assert elsewhere.range("g", 0, 5) == [("c", sk(3)), ("a", sk(1))]

    def test_count_many_fetches_a_pages_manifests_at_once(self, index):
        groups = [f"g{n}" for n in range(6)]
        for group in groups[:3]:
            index.replace(group, [("a", sk(1))])
        index.storage._manifests.clear()
        threads = set()
        index.storage.client.meta.events.register(
            "before-call.s3.GetObject", lambda **kw: threads.add(threading.get_ident()))
        assert index.count_many(groups) == {"g0": 1, "g1": 1, "g2": 1, "g3": 0, "g4": 0, "g5": 0}
        assert len(threads) > 1

    def test_a_reader_elsewhere_sees_the_last_published_generation(self, index):
        index.replace("g", [("a", sk(1))])
        index.add_many("g", [("b", sk(2))])  # in the writer's local log, not yet committed
        elsewhere = FileIndex(dict(index.options, PATH=index.journal.root.parent / "other-host"))
        assert elsewhere.range("g", 0, 5) == [("a", sk(1))]
        assert index.range("g", 0, 5) == [("b", sk(2)), ("a", sk(1))]  # the writer's host: exact
        index.commit("g")
        elsewhere.storage.forget("g")  # or wait MANIFEST_SECONDS
        assert elsewhere.range("g", 0, 5) == [("b", sk(2)), ("a", sk(1))]
