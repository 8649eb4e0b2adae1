"""The index contract, proven on every backend over its real store."""
import pytest

from pagination_index.backends.base import BaseIndex
from pagination_index.backends.relational import RelationalIndex
from tests.pagination_index.contract import IndexContract


class TestRelationalIndex(IndexContract):
    @pytest.fixture
    def index(self, db):
        return RelationalIndex({})

    @pytest.mark.django_db(transaction=True)
    def test_replace_is_atomic_for_a_concurrent_reader(self, index):
        super().test_replace_is_atomic_for_a_concurrent_reader(index)

    def test_counts_are_kept_without_scanning(self, index, django_assert_max_num_queries):
        index.add_many("g", [(f"m{i}", f"2021-01-01T00:00:00.{i:06d}Z") for i in range(100)])
        with django_assert_max_num_queries(1):
            assert index.count("g") == 100


class TestBaseIndexDefaults(TestRelationalIndex):
    """The base class's slow-but-correct defaults (count_newer by binary search over at()), proven
    through a backend that keeps only the essentials."""

    @pytest.fixture
    def index(self, db):
        return EssentialsOnly({})


class EssentialsOnly(RelationalIndex):
    count_newer = BaseIndex.count_newer
    count_newer_many = BaseIndex.count_newer_many
