"""The fast window after it expires (comments/page_cache.py): served while a background thread reads
it again from DynamoDB Local, never put back over a write, and read by the request itself once its
grace is over; a write's invalidation reaches every process that shares Django's cache. The gate
below holds the real Query's thread; it stands in for a slow DynamoDB, not for it."""
from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.core.cache import cache

from comments import store
from comments.page_cache import PageCache, cache_key, page_cache, product_caches_forget
from comments.store import Comment, put_comments
from tests.factories import make_comments

SKU = "WINDOW-1"


class Gate:
    """Wraps store.newest: records which thread called it and holds each call, before or after the
    real Query, until opened."""

    def __init__(self, monkeypatch, *, hold: str):
        self.threads: list[str] = []
        self.opened = threading.Event()
        self.held = threading.Event()
        real = store.newest

        def gated(*args, **kwargs):
            self.threads.append(threading.current_thread().name)
            if hold == "before":
                self._hold()
            result = real(*args, **kwargs)
            if hold == "after":
                self._hold()
            return result

        monkeypatch.setattr(store, "newest", gated)

    def _hold(self) -> None:
        self.held.set()
        assert self.opened.wait(20), "the gate was never opened"


def refreshers(gate: Gate) -> int:
    """How many of the gate's calls came from the background refresh threads."""
    return sum(name.startswith("window-refresh") for name in gate.threads)


def refreshes_done(timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not PageCache.refresher.idle:
        assert time.monotonic() < deadline, "a refresh never finished"
        time.sleep(0.005)


def newer_comment(sk: str = "2030-01-01T00:00:00.000000Z", author: str = "Late") -> Comment:
    """A comment newer than every factory comment (their SKs are in the 1970s)."""
    return Comment(pk=uuid.uuid4().hex, sk=sk, sku=SKU, author=author,
                   body="A comment written after the window was read", rating=5)


def pks(window) -> list[str]:
    return [comment.pk for comment in window.comments]


@pytest.fixture
def window(comments_table, settings):
    """A 5-comment product whose window is read once and then goes stale: returns that window."""
    put_comments(make_comments(SKU, 5))
    settings.COMMENTS_FAST_CACHE_SECONDS = 0.2
    settings.COMMENTS_FAST_STALE_SECONDS = 30
    first = page_cache.windows([SKU])[0]
    assert len(first.comments) == 5
    put_comments([newer_comment()])  # straight to the table: nothing drops the window
    time.sleep(0.3)
    yield first
    refreshes_done()
    product_caches_forget(SKU)


def test_a_stale_window_is_served_while_a_background_thread_reads_it_again(window, monkeypatch):
    gate = Gate(monkeypatch, hold="before")
    assert pks(page_cache.windows([SKU])[0]) == pks(window)  # no wait: the request did not Query
    assert gate.held.wait(10)
    assert pks(page_cache.windows([SKU])[0]) == pks(window)  # still under way: served again, no second read
    assert refreshers(gate) == 1 and len(gate.threads) == 1
    gate.opened.set()
    refreshes_done()
    fresh = page_cache.windows([SKU])[0]
    assert [c.author for c in fresh.comments[:1]] == ["Late"] and len(fresh.comments) == 6
    assert cache.get(cache_key("fast", SKU))[1] == fresh  # in Django's cache, shared with other processes
    assert len(gate.threads) == 1


def test_a_window_past_its_grace_is_read_by_the_request(window, settings, monkeypatch):
    settings.COMMENTS_FAST_STALE_SECONDS = 0.05  # stale 0.1 s ago: beyond it
    gate = Gate(monkeypatch, hold="never")
    fresh = page_cache.windows([SKU])[0]
    assert len(fresh.comments) == 6 and gate.threads == [threading.current_thread().name]


def test_no_grace_means_the_request_reads_it(window, settings, monkeypatch):
    settings.COMMENTS_FAST_STALE_SECONDS = 0
    gate = Gate(monkeypatch, hold="never")
    assert len(page_cache.windows([SKU])[0].comments) == 6 and gate.threads == [threading.current_thread().name]


def test_a_refresh_read_before_a_write_does_not_put_the_old_window_back(window, monkeypatch):
    """A post drops the window (product_caches_forget) while a refresh that read before it is under
    way: the refresh's result is dropped too."""
    gate = Gate(monkeypatch, hold="after")
    assert pks(page_cache.windows([SKU])[0]) == pks(window)
    assert gate.held.wait(10)  # the refresh has read the table: 6 comments
    put_comments([newer_comment("2031-01-01T00:00:00.000000Z", "Latest")])
    product_caches_forget(SKU)  # what comment_create does after its write
    gate.opened.set()
    refreshes_done()
    assert cache.get(cache_key("fast", SKU)) is None
    fresh = page_cache.windows([SKU])[0]
    assert fresh.comments[0].author == "Latest" and len(fresh.comments) == 7
    assert refreshers(gate) == 1 and gate.threads[1:] == [threading.current_thread().name]


def test_a_write_in_one_process_reaches_the_windows_another_process_holds(comments_table, settings):
    """Each process keeps the windows it unpickled (`other` stands for a second worker sharing
    Django's cache); a post anywhere drops them everywhere at once, not after their seconds."""
    settings.COMMENTS_FAST_CACHE_SECONDS = 60
    put_comments(make_comments(SKU, 3))
    other = PageCache()
    assert len(page_cache.windows([SKU])[0].comments) == 3
    assert len(other.windows([SKU])[0].comments) == 3  # unpickled, and kept by that process
    assert len(other.windows([SKU])[0].comments) == 3
    put_comments([newer_comment()])
    product_caches_forget(SKU)  # this process posted
    assert [c.author for c in other.windows([SKU])[0].comments[:1]] == ["Late"]
