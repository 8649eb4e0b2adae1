"""The index contract, proven on every backend over its real store."""
import pytest
from django.db import connections
from django_redis import get_redis_connection

from pagination_index.backends.redis import RedisIndex, score_sort_key, sort_key_score
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
        with django_assert_max_num_queries(1, connection=connections[index.using]):
            assert index.count("g") == 100


@pytest.mark.django_db
class TestRelationalIndexOnSQLite(RelationalContract):
    @pytest.fixture
    def index(self):
        return RelationalIndex({})


@pytest.mark.django_db(databases="__all__")
class TestRelationalIndexOnPostgreSQL(RelationalContract):
    @pytest.fixture
    def index(self, postgres_database):
        return RelationalIndex({"DATABASE": postgres_database})

    def test_rank_index_and_member_lookup_are_bytewise_and_covering(self, index):
        """Collation "C" (DynamoDB's byte order) on the ordered columns, and the upsert's lookup
        answered from the unique index alone (sort_key INCLUDEd)."""
        with connections[index.using].cursor() as cursor:
            cursor.execute(
                "SELECT attname, collname FROM pg_attribute JOIN pg_collation ON attcollation = pg_collation.oid "
                "WHERE attrelid = 'pagination_index_indexentry'::regclass AND attname IN ('member', 'sort_key')"
            )
            assert dict(cursor.fetchall()) == {"member": "C", "sort_key": "C"}
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'pagination_index_entry_member'")
            assert cursor.fetchone()[0].endswith('("group", member) INCLUDE (sort_key)')


class TestRedisIndex(IndexContract):
    @pytest.fixture
    def index(self, redis_index_options):
        return RedisIndex(redis_index_options)

    def test_score_is_the_sort_key_in_integer_microseconds(self, index):
        index.add_many("g", [("a", "2021-08-25T13:00:00.123456Z")])
        raw = get_redis_connection("index").zscore(index.key("g"), "a")
        assert raw == 1629896400123456

    @pytest.mark.parametrize("sort_key, score", [
        ("1970-01-01T00:00:00.000000Z", 0),
        ("1969-12-31T23:59:59.999999Z", -1),
        ("2021-08-25T13:00:00.123456Z", 1629896400123456),
        ("2255-06-05T23:47:34.740992Z", 2**53),
        ("1684-07-28T00:12:25.259008Z", -(2**53)),
    ])
    def test_sort_key_round_trips_exactly(self, sort_key, score):
        assert sort_key_score(sort_key) == score
        assert score_sort_key(float(score)) == sort_key

    @pytest.mark.parametrize("sort_key", [
        "2021-08-25T13:00:00Z", "2021-08-25T13:00:00.123Z", "2021-08-25 13:00:00.000000Z",
        "2021-02-30T00:00:00.000000Z", "2255-06-05T23:47:34.740993Z", "x",
    ])
    def test_sort_keys_it_cannot_hold_exactly_are_refused(self, index, sort_key):
        with pytest.raises(ValueError):
            index.add_many("g", [("a", sort_key)])
        assert index.count("g") == 0

    def test_replace_leaves_no_temporary_key_and_no_expiry(self, index):
        client = get_redis_connection("index")
        index.replace("g", [(f"m{i}", sk(i)) for i in range(12_000)])  # more than one ZADD chunk
        assert index.count("g") == 12_000
        assert client.ttl(index.key("g")) == -1
        assert [key for key in client.scan_iter(match=f"{index.prefix}tmp:*")] == []

    def test_clear_deletes_only_its_own_prefix(self, index, redis_index_options):
        client = get_redis_connection("index")
        neighbour = RedisIndex(dict(redis_index_options, KEY_PREFIX=index.prefix[:-1] + "-other:"))
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

    def test_groups_registry_forgets_emptied_groups(self, index):
        client = get_redis_connection("index")
        index.add_many("g1", [("a", sk(1))])
        index.add_many("g2", [("a", sk(1))])
        index.remove_many("g2", ["a"])
        assert index.groups() == ["g1"]
        assert client.smembers(index.registry) == {b"g1"}
