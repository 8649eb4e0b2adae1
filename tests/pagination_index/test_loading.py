"""Loading the index (pagination_index.indexes, a BaseConnectionHandler), the error funnel every
backend gets from BaseIndex, and the fail-fast wrapper request handling reads through. A backend
here is a real BaseIndex subclass whose store is a dict; it fails the way a store does, by raising
its own error."""
from __future__ import annotations

import pytest

from pagination_index import IndexUnavailable, get_index, index, indexes
from pagination_index import reset as reset_index
from pagination_index.backends.base import BaseIndex
from pagination_index.backends.base import FailFastIndex
from tests.config import index_config


class StoreDown(Exception):
    pass


class DictIndex(BaseIndex):
    """Counts in a dict; OPTIONS["DOWN"] makes every read raise the store's own error."""

    unavailable_errors = (StoreDown,)
    error_label = "dict index"
    calls = 0

    def count(self, group: str) -> int:
        type(self).calls += 1
        if self.options.get("DOWN"):
            raise StoreDown(f"no answer for {group}")
        return {"a": 3}.get(group, 0)

    def close(self) -> None:
        self.closed = True


PATH = f"{__name__}.DictIndex"


@pytest.fixture
def dict_index(settings):
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": PATH, "OPTIONS": {}})
    DictIndex.calls = 0
    return settings


def test_a_backend_raises_its_own_errors_and_callers_see_index_unavailable(dict_index):
    down = DictIndex({"DOWN": True})
    with pytest.raises(IndexUnavailable, match="dict index: no answer for a") as caught:
        down.count("a")
    assert isinstance(caught.value.__cause__, StoreDown)
    assert DictIndex({}).count("a") == 3
    assert DictIndex.count_many.__qualname__ == "BaseIndex.count_many"  # inherited defaults stay as they are


def test_the_handler_makes_one_backend_per_process_until_reset(dict_index):
    first = get_index()
    assert isinstance(first, DictIndex) and get_index() is first
    assert isinstance(indexes["pages"], FailFastIndex) and index.count("a") == 3
    reset_index()
    assert getattr(first, "closed", False)
    assert get_index() is not first


def test_settings_changes_reach_the_handler(dict_index):
    first = get_index()
    dict_index.PAGINATION_INDEX = index_config(**{"BACKEND": PATH, "OPTIONS": {"DOWN": True}})  # the library resets it (conf.py)
    assert get_index() is not first and get_index().options == {"DOWN": True}


def test_request_handling_fails_fast_after_a_failure(dict_index):
    dict_index.PAGINATION_INDEX = index_config(**{"BACKEND": PATH, "OPTIONS": {"DOWN": True}}, FAIL_FAST_SECONDS=60)
    with pytest.raises(IndexUnavailable, match="no answer"):
        index.count("a")
    with pytest.raises(IndexUnavailable, match="failing fast"):
        index.count("a")
    assert DictIndex.calls == 1  # the second call never reached the store
    with pytest.raises(IndexUnavailable, match="no answer"):
        get_index().count("a")  # commands read the backend itself: they wait for the store
    assert DictIndex.calls == 2
