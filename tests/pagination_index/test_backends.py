"""The index contract, proven on every backend over its real store."""
import pytest
from django.db import connections
from redis.crc import key_slot

from pagination_index import micros_sort_key
from pagination_index.backends.base import Add, BaseIndex, IndexUnavailable
from pagination_index.backends.dynamodb import DynamoDBIndex
from pagination_index.backends.files import FileIndex
from pagination_index.backends.redis import RedisIndex, group_of_key, sort_key_score
from pagination_index.backends.relational import RelationalIndex
from tests.pagination_index.contract import IndexContract, sk


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


class TestDynamoDBIndex(IndexContract):
    """Pages of 3 entries (dynamodb_index_options), so the contract's groups span several items."""

    @pytest.fixture
    def index(self, dynamodb_index_options):
        return DynamoDBIndex(dynamodb_index_options)

    def test_pages_hold_the_oldest_entries_first_and_a_stats_item(self, index):
        index.add_many("g", [(f"m{n}", sk(n)) for n in range(7)])
        items = index.client.query(TableName=index.table, KeyConditionExpression="g = :g",
                                   ExpressionAttributeValues={":g": {"S": "g"}}, ConsistentRead=True)["Items"]
        pages = {int(item["p"]["N"]): index._page_entries(item) for item in items if item["p"]["N"] != "-1"}
        assert pages == {0: [("m0", sk(0)), ("m1", sk(1)), ("m2", sk(2))],
                         1: [("m3", sk(3)), ("m4", sk(4)), ("m5", sk(5))], 2: [("m6", sk(6))]}
        index.remove_many("g", ["m6"])
        assert index.groups() == ["g"] and index.count("g") == 6 and index.at("g", 0) == ("m5", sk(5))

    def test_an_unreachable_store_is_index_unavailable(self):
        index = DynamoDBIndex({"ENDPOINT_URL": "http://127.0.0.1:9", "TABLE": "t", "CONNECT_TIMEOUT": 0.2, "MAX_ATTEMPTS": 1})
        with pytest.raises(IndexUnavailable):
            index.count("g")


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
        assert sorted(key.rsplit("/", 1)[1] for key in keys) == ["gen-00000000000000000001", "manifest"]
        calls = []
        storage.client.meta.events.register("before-call.s3.GetObject", lambda params, **kw: calls.append(params))
        assert index.at("g", 42) == ("m057", sk(57))
        assert [call.get("headers", {}).get("Range") for call in calls][-1].startswith("bytes=")

    def test_a_reader_elsewhere_sees_the_last_published_generation(self, index):
        index.replace("g", [("a", sk(1))])
        index.add_many("g", [("b", sk(2))])  # in the writer's local log, not yet committed
        elsewhere = FileIndex(dict(index.options, PATH=index.journal.root.parent / "other-host"))
        assert elsewhere.range("g", 0, 5) == [("a", sk(1))]
        assert index.range("g", 0, 5) == [("b", sk(2)), ("a", sk(1))]  # the writer's host: exact
        index.commit("g")
        elsewhere.storage.forget("g")  # or wait MANIFEST_SECONDS
        assert elsewhere.range("g", 0, 5) == [("b", sk(2)), ("a", sk(1))]
