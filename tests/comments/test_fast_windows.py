"""The fast window (pagination_index.sequence.Shared) on DynamoDB Local: each group's newest items read
once and shared by pages 1..FAST_PAGES for CACHE_SECONDS, in Django's cache and in each process's own
memo; a write's one generation number (invalidate) reaches every process at once, and a product's
rating groups move on with it."""
from __future__ import annotations

import time
import uuid

import pytest

from comments.caching import product_caches_forget
from comments.selectors import comments_query
from comments.store import Comment, put_comments
from pagination_index import TableSource, sources
from pagination_index.sequence import Shared
from tests.config import set_cache_seconds
from tests.factories import make_comments

SKU = "WINDOW-1"


def newer_comment(sk: str = "2030-01-01T00:00:00.000000Z", author: str = "Late", rating: int = 5) -> Comment:
    """A comment newer than every factory comment (their SKs are in the 1970s)."""
    return Comment(pk=uuid.uuid4().hex, sk=sk, sku=SKU, author=author,
                   body="A comment written after the window was read", rating=rating)


@pytest.fixture
def reads(monkeypatch):
    """Every Query a source's read() sends, by group (the real call goes on; on the class, so the
    sources made again after a settings change count too)."""
    sent: list[str] = []
    real = TableSource.read

    def counted(self, group, count, **kwargs):
        sent.append(group)
        return real(self, group, count, **kwargs)

    monkeypatch.setattr(TableSource, "read", counted)
    return sent


def authors(items) -> list[str]:
    return [comment.author for comment in items]


def test_the_window_is_read_once_and_shared_by_the_first_pages(comments_table, settings, reads):
    set_cache_seconds(settings, 60)
    put_comments(make_comments(SKU, 45))
    first = list(comments_query(SKU)[0:20])
    assert reads == [SKU]
    assert list(comments_query(SKU)[20:40]) and list(comments_query(SKU)[40:60]) and reads == [SKU]
    put_comments([newer_comment()])  # straight to the table: nothing moves the generation on
    assert list(comments_query(SKU)[0:20]) == first and reads == [SKU]


def test_a_window_past_its_seconds_is_read_again(comments_table, settings, reads):
    set_cache_seconds(settings, 0.2)
    put_comments(make_comments(SKU, 5))
    assert len(comments_query(SKU)[0:20]) == 5
    put_comments([newer_comment()])
    time.sleep(0.3)
    assert authors(comments_query(SKU)[0:1]) == ["Late"] and reads == [SKU, SKU]


def test_no_seconds_means_every_request_reads_it(comments_table, settings, reads):
    set_cache_seconds(settings, 0)
    put_comments(make_comments(SKU, 3))
    comments_query(SKU)[0:20]
    comments_query(SKU)[0:20]
    assert reads == [SKU, SKU]


def test_a_write_in_one_process_reaches_the_windows_another_process_holds(comments_table, settings):
    """Each process keeps the windows it unpickled (`other` stands for a second worker sharing Django's
    cache); a post anywhere moves the product's generation on, so they are read again everywhere at once,
    not after their seconds: the product's window and its rating groups' alike."""
    set_cache_seconds(settings, 60)
    put_comments(make_comments(SKU, 3))
    products, ratings = sources["comments"], sources["comment_ratings"]
    here = comments_query(SKU)
    assert len(here[0:20]) == 3
    other = Shared(products)
    window = other.get("window", [SKU], lambda groups: pytest.fail("the other process must find it shared"),
                       memo=True)[SKU]
    assert len(window.items) == 3
    rating_window = comments_query(SKU, [5]).windows()[f"{SKU}/5"]
    put_comments([newer_comment()])
    product_caches_forget(SKU)  # what comment_create does after its write: one generation
    assert authors(comments_query(SKU)[0:1]) == ["Late"]  # this process reads it again
    asked = []
    fresh = other.get("window", [SKU], lambda groups: asked.append(groups), memo=True)
    assert asked == [] and len(fresh[SKU].items) == 4  # the other process: the new generation's, shared
    again = Shared(ratings).get("window", [f"{SKU}/5"], lambda groups: {f"{SKU}/5": "read again"})
    assert again == {f"{SKU}/5": "read again"} and rating_window is not None
