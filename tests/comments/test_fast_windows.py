"""The fast window after it expires (comments/windows.py): served while a background thread reads it
again from DynamoDB Local, never put back over a write, and read by the request itself once its grace
is over. The gate below holds the real Query's thread; it stands in for a slow DynamoDB, not for it."""
from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.core.cache import cache

from comments import store, windows
from comments.store import Comment, put_comments
from comments.windows import _fast_cache_key, fast_windows, forget_fast_window
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


def newer_comment() -> Comment:
    """A comment newer than every factory comment (their SKs are in the 1970s)."""
    return Comment(pk=uuid.uuid4().hex, sk="2030-01-01T00:00:00.000000Z", sku=SKU, author="Late",
                   body="A comment written after the window was read", rating=5)


@pytest.fixture
def window(comments_table, settings):
    """A 5-comment product whose window is read once and then expires: returns that window."""
    put_comments(make_comments(SKU, 5))
    settings.COMMENTS_FAST_CACHE_SECONDS = 0.2
    settings.COMMENTS_FAST_STALE_SECONDS = 30
    cache.delete(_fast_cache_key(SKU))
    first = fast_windows([SKU])[0]
    assert len(first.comments) == 5
    put_comments([newer_comment()])  # straight to the table: nothing drops the window
    time.sleep(0.3)
    cache.delete(_fast_cache_key(SKU))  # expired in Django's cache too: the refresh must Query
    yield first
    windows.refresher.wait()
    forget_fast_window(SKU)


def test_an_expired_window_is_served_while_a_background_thread_reads_it_again(window, monkeypatch):
    gate = Gate(monkeypatch, hold="before")
    assert fast_windows([SKU])[0] is window  # no wait: the request did not Query
    assert gate.held.wait(10)
    assert fast_windows([SKU])[0] is window  # still under way: served again, no second read started
    assert refreshers(gate) == 1 and len(gate.threads) == 1
    gate.opened.set()
    windows.refresher.wait()
    fresh = fast_windows([SKU])[0]
    assert [c.author for c in fresh.comments[:1]] == ["Late"] and len(fresh.comments) == 6
    assert cache.get(_fast_cache_key(SKU)) == fresh  # shared with other processes as before
    assert len(gate.threads) == 1


def test_a_window_past_its_grace_is_read_by_the_request(window, settings, monkeypatch):
    settings.COMMENTS_FAST_STALE_SECONDS = 0.05  # expired 0.3 s ago: beyond it
    gate = Gate(monkeypatch, hold="never")
    fresh = fast_windows([SKU])[0]
    assert len(fresh.comments) == 6 and gate.threads == [threading.current_thread().name]


def test_no_grace_means_the_request_reads_it(window, settings, monkeypatch):
    settings.COMMENTS_FAST_STALE_SECONDS = 0
    gate = Gate(monkeypatch, hold="never")
    assert len(fast_windows([SKU])[0].comments) == 6 and gate.threads == [threading.current_thread().name]


@pytest.mark.parametrize("others_forgotten", [0, 1100], ids=["alone", "past-the-bound"])
def test_a_refresh_read_before_a_write_does_not_put_the_old_window_back(window, monkeypatch, others_forgotten):
    """A post drops the window (forget_fast_window) while a refresh that read before it is under way:
    the refresh's result is dropped too, here and in Django's cache; also when so many other windows
    were dropped meanwhile that the refresher trimmed what it remembers of them."""
    gate = Gate(monkeypatch, hold="after")
    assert fast_windows([SKU])[0] is window
    assert gate.held.wait(10)  # the refresh has read the table: 6 comments
    latest = Comment(pk=uuid.uuid4().hex, sk="2031-01-01T00:00:00.000000Z", sku=SKU, author="Latest",
                     body="Posted while the refresh was under way", rating=4)
    put_comments([latest])
    forget_fast_window(SKU)  # what comment_create does after its write
    for number in range(others_forgotten):
        windows.refresher.forget(f"another-window-{number}")
    gate.opened.set()
    windows.refresher.wait()
    assert cache.get(_fast_cache_key(SKU)) is None
    fresh = fast_windows([SKU])[0]
    assert fresh.comments[0].author == "Latest" and len(fresh.comments) == 7
    assert refreshers(gate) == 1 and gate.threads[1:] == [threading.current_thread().name]
