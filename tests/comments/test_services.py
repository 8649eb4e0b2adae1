"""comment_create and the store's conditional put, on DynamoDB Local."""
import dataclasses

import pytest

from comments import services, store
from comments.services import comment_create
from comments.table.client import dynamodb
from comments.table.keys import table_name
from comments.selectors import comments_query
from tests.config import set_cache_seconds


def items():
    return dynamodb().scan(TableName=table_name(), ConsistentRead=True)["Items"]


def test_comment_create_puts_one_item(comments_table):
    comment = comment_create(sku="SVC-1", author="Ann", rating=5, body="Great")
    [item] = items()
    assert item == store.item_from_comment(comment)
    assert set(item) == {"PK", "SK", "PK2", "PK2R", "author", "body", "rating"}
    assert item["PK2"] == {"S": "SVC-1"} and item["rating"] == {"N": "5"}
    assert item["PK2R"] == {"S": "SVC-1/5"}  # the byRating GSI's key (issue 9)
    assert store.get_comment(comment.pk, comment.sk) == comment


def test_comment_create_moves_the_shared_window_on(comments_table, settings):
    """The product's window and its rating groups' windows are shared for 60 s; a post's one
    generation number (invalidate) makes every process read them afresh."""
    set_cache_seconds(settings, 60)
    assert list(comments_query("SVC-2")[0:20]) == [] and list(comments_query("SVC-2", [3])[0:20]) == []
    comment = comment_create(sku="SVC-2", author="Ann", rating=3, body="Fine")
    assert [c.pk for c in comments_query("SVC-2")[0:20]] == [comment.pk]
    assert [c.pk for c in comments_query("SVC-2", [3])[0:20]] == [comment.pk]


@pytest.mark.parametrize("rating", [0, 6, "5"])
def test_comment_create_refuses_a_rating_outside_1_to_5(comments_table, rating):
    with pytest.raises(ValueError):
        comment_create(sku="SVC-3", author="Ann", rating=rating, body="x")
    assert items() == []


def test_put_new_comment_never_overwrites(comments_table):
    comment = store.Comment(pk="a" * 32, sk=store.sk_now(), sku="SVC-4", author="Ann", body="first", rating=4)
    store.put_new_comment(comment)
    with pytest.raises(store.CommentExists):
        store.put_new_comment(dataclasses.replace(comment, body="second"))
    assert store.get_comment(comment.pk, comment.sk).body == "first"


def test_put_new_comment_repeated_is_success(comments_table):
    """A retry of a put that did land (its response was lost) finds its own item: not an error."""
    comment = store.Comment(pk="b" * 32, sk=store.sk_now(), sku="SVC-5", author="Ann", body="once", rating=2)
    store.put_new_comment(comment)
    store.put_new_comment(comment)
    assert len(items()) == 1


def test_comment_create_takes_a_new_key_when_one_is_taken(comments_table, monkeypatch):
    taken = comment_create(sku="SVC-6", author="Bo", rating=1, body="mine")
    ids = iter([taken.pk, "c" * 32])
    monkeypatch.setattr(store, "sk_now", lambda: taken.sk)  # same key, as if uuid4 collided
    monkeypatch.setattr(services, "new_comment_id", lambda: next(ids))
    comment = comment_create(sku="SVC-6", author="Cy", rating=2, body="yours")
    assert comment.pk == "c" * 32
    assert store.get_comment(taken.pk, taken.sk).body == "mine"
    assert len(items()) == 2
