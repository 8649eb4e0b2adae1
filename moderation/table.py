"""The moderation's writes to the comments table: find a comment by its id, hide, unhide, delete.

Hiding moves a comment's GSI keys (PK2, PK2R) into attributes of their own. Both GSIs are sparse (an
item without the index's key attribute is not in it), so the comment leaves pages 1-10 at once, and
the stream's MODIFY record (a group key gone) takes it out of the pagination index, its counts and its
rating statistics. Unhiding puts the keys back: the same SK, so the same place. Nothing on the page
path needs to know about hidden comments.

A GSI holds only the items that carry its key attributes ("Take advantage of sparse indexes",
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-indexes-general-sparse-indexes.html).
"""
from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from comments.store import format_sk
from comments.table.client import dynamodb, dynamodb_bulk, store_errors
from comments.table.keys import GROUP, MEMBER, RATING_GROUP, SORT_KEY, product_index_name, table_name

# Where a hidden comment keeps its GSI keys.
HIDDEN_GROUP = "hidden_PK2"
HIDDEN_RATING_GROUP = "hidden_PK2R"
HIDDEN_AT = "hidden_at"


@dataclass(frozen=True)
class StoredComment:
    """A comment as the table holds it, hidden or not."""
    pk: str
    sk: str
    sku: str
    rating_group: str | None  # PK2R (or where it is kept while hidden); None on items from before it
    author: str
    body: str
    rating: int
    hidden: bool

    @property
    def key(self) -> dict:
        return {MEMBER: {"S": self.pk}, SORT_KEY: {"S": self.sk}}


def stored_comment(item: dict) -> StoredComment:
    hidden = GROUP not in item
    rating_group = item.get(HIDDEN_RATING_GROUP if hidden else RATING_GROUP)
    return StoredComment(
        pk=item[MEMBER]["S"], sk=item[SORT_KEY]["S"],
        sku=item[HIDDEN_GROUP if hidden else GROUP]["S"],
        rating_group=rating_group["S"] if rating_group else None,
        author=item.get("author", {}).get("S", ""), body=item.get("body", {}).get("S", ""),
        rating=int(item["rating"]["N"]) if "rating" in item else 0, hidden=hidden)


@store_errors("Query by comment id")
def find_comment(pk: str) -> StoredComment | None:
    """The comment with this id (PK is the table's hash key: one Query, strongly consistent)."""
    response = dynamodb().query(
        TableName=table_name(), KeyConditionExpression="#m = :m", ConsistentRead=True,
        ExpressionAttributeNames={"#m": MEMBER}, ExpressionAttributeValues={":m": {"S": pk}})
    items = response.get("Items", [])
    return stored_comment(items[0]) if items else None


def _update(comment: StoredComment, **kwargs) -> bool:
    """One conditional UpdateItem; False when its condition failed (another moderator got there
    first, or the comment was deleted meanwhile)."""
    try:
        dynamodb().update_item(TableName=table_name(), Key=comment.key, **kwargs)
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
            return False
        raise
    return True


def _keys(comment: StoredComment, shown: str, kept: str, shown_rating: str, kept_rating: str) -> tuple[dict, dict]:
    names = {"#from": kept, "#to": shown}
    values = {":g": {"S": comment.sku}}
    if comment.rating_group is not None:
        names.update({"#rfrom": kept_rating, "#rto": shown_rating})
        values[":r"] = {"S": comment.rating_group}
    return names, values


@store_errors("UpdateItem (hide)")
def hide(comment: StoredComment, *, now) -> bool:
    """Move the comment's GSI keys aside; False if it is not shown (already hidden, or deleted)."""
    names, values = _keys(comment, HIDDEN_GROUP, GROUP, HIDDEN_RATING_GROUP, RATING_GROUP)
    rating = ", #rto = :r" if ":r" in values else ""
    removed = ", #rfrom" if ":r" in values else ""
    return _update(
        comment, UpdateExpression=f"SET #to = :g{rating}, #at = :at REMOVE #from{removed}",
        ConditionExpression="#from = :g", ExpressionAttributeNames={**names, "#at": HIDDEN_AT},
        ExpressionAttributeValues={**values, ":at": {"S": format_sk(now)}})


@store_errors("UpdateItem (unhide)")
def unhide(comment: StoredComment) -> bool:
    """Put the comment's GSI keys back (same SK: same place); False if it is not hidden."""
    names, values = _keys(comment, GROUP, HIDDEN_GROUP, RATING_GROUP, HIDDEN_RATING_GROUP)
    rating = ", #rto = :r" if ":r" in values else ""
    removed = ", #rfrom" if ":r" in values else ""
    return _update(
        comment, UpdateExpression=f"SET #to = :g{rating} REMOVE #from{removed}, #at",
        ConditionExpression="#from = :g", ExpressionAttributeNames={**names, "#at": HIDDEN_AT},
        ExpressionAttributeValues=values)


@store_errors("DeleteItem")
def delete(comment: StoredComment) -> bool:
    """Delete the item; False if it was already gone."""
    try:
        dynamodb().delete_item(TableName=table_name(), Key=comment.key, ConditionExpression="attribute_exists(#m)",
                               ExpressionAttributeNames={"#m": MEMBER})
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
            return False
        raise
    return True


class TooManyToRead(Exception):
    """An erasure by author would read more of a product's comments than one web request may."""

    def __init__(self, sku: str, limit: int):
        super().__init__(f"{sku} has more than {limit:,} comments to read for an erasure by author name")
        self.sku, self.limit = sku, limit


@store_errors("Query of an author's comments")
def shown_comments_by_author(sku: str, author: str, *, read_limit: int | None = None) -> list[StoredComment]:
    """Every shown comment by exactly this author name on a product: the product's GSI partition,
    filtered (DynamoDB still reads the whole partition; an erasure is rare). Hidden comments are in
    no GSI: the moderation's own records name them (services.comments_erase). With `read_limit`, more
    items than that in the partition raise TooManyToRead (checked page by page, before reading on)."""
    pages = dynamodb_bulk().get_paginator("query").paginate(
        TableName=table_name(), IndexName=product_index_name(),
        KeyConditionExpression="#g = :g", FilterExpression="#a = :a",
        ExpressionAttributeNames={"#g": GROUP, "#a": "author"},
        ExpressionAttributeValues={":g": {"S": sku}, ":a": {"S": author}},
        PaginationConfig={"PageSize": min(read_limit + 1, 1000)} if read_limit is not None else {})
    found, read = [], 0
    for page in pages:
        read += page.get("ScannedCount", 0)
        if read_limit is not None and read > read_limit:
            raise TooManyToRead(sku, read_limit)
        found += [stored_comment(item) for item in page.get("Items", [])]
    return found
