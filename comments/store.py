"""Reads and writes of the comments table. Items are (de)serialised by hand: our attributes are
only S and N, and this is on the hot path of every page."""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable

from botocore.exceptions import ClientError

from pagination_index import aws

SK_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
BATCH_WRITE_MAX = 25


@dataclass(frozen=True, slots=True)
class Comment:
    pk: str
    sk: str
    sku: str
    author: str
    body: str
    rating: int

    @property
    def created(self) -> datetime:
        return parse_sk(self.sk)

    @property
    def order_key(self) -> tuple[str, str]:
        """Index order (DESIGN.md): by SK, ties broken by PK; newest first is this, descending."""
        return self.sk, self.pk


def format_sk(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime(SK_FORMAT)


def parse_sk(sk: str) -> datetime:
    return datetime.strptime(sk, SK_FORMAT).replace(tzinfo=timezone.utc)


def sk_now() -> str:
    return format_sk(datetime.now(timezone.utc))


def comment_from_item(item: dict) -> Comment:
    return Comment(
        pk=item["PK"]["S"],
        sk=item["SK"]["S"],
        sku=item["PK2"]["S"],
        author=item.get("author", {}).get("S", ""),
        body=item.get("body", {}).get("S", ""),
        rating=int(item["rating"]["N"]) if "rating" in item else 0,
    )


def item_from_comment(comment: Comment) -> dict:
    return {
        "PK": {"S": comment.pk},
        "SK": {"S": comment.sk},
        "PK2": {"S": comment.sku},
        "author": {"S": comment.author},
        "body": {"S": comment.body},
        "rating": {"N": str(comment.rating)},
    }


def put_comments(comments: Iterable[Comment]) -> int:
    """BatchWriteItem in groups of 25, retrying unprocessed items with backoff; returns items written."""
    client = aws.dynamodb()
    table = aws.table_name()
    batch: list[dict] = []
    written = 0

    def flush(requests: list[dict]) -> None:
        delay = 0.05
        while requests:
            response = client.batch_write_item(RequestItems={table: requests})
            requests = response.get("UnprocessedItems", {}).get(table, [])
            if requests:
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    for comment in comments:
        batch.append({"PutRequest": {"Item": item_from_comment(comment)}})
        if len(batch) == BATCH_WRITE_MAX:
            flush(batch)
            written += len(batch)
            batch = []
    if batch:
        flush(batch)
        written += len(batch)
    return written


class CommentExists(Exception):
    """A put found an item already at the comment's key (and it is not this same comment)."""


def put_new_comment(comment: Comment) -> None:
    """PutItem that never overwrites: the condition fails if the key is taken.

    The client retries after timeouts, so a condition failure can be our own first attempt that
    did land: the item that is there is returned and, if it is this comment, that is success.
    """
    item = item_from_comment(comment)
    try:
        aws.dynamodb().put_item(
            TableName=aws.table_name(),
            Item=item,
            ConditionExpression="attribute_not_exists(PK)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        if exc.response.get("Item") != item:
            raise CommentExists(comment.pk) from exc


def get_comment(pk: str, sk: str) -> Comment | None:
    """One comment by its table key, strongly consistent (unlike any read of the GSI)."""
    response = aws.dynamodb().get_item(
        TableName=aws.table_name(), Key={"PK": {"S": pk}, "SK": {"S": sk}}, ConsistentRead=True,
    )
    item = response.get("Item")
    return comment_from_item(item) if item else None


def newest(sku: str, count: int, *, after: tuple[str, str] | None = None, skip: int = 0) -> tuple[list[Comment], bool]:
    """`count` comments of a product in index order, and whether the product has none beyond them.

    Without `after`: from the newest. With `after`, an index entry (PK, SK), and skip=0: just after
    that comment, using its
    keys as ExclusiveStartKey. With skip>0: from `after`'s SK inclusive, dropping the first `skip`
    comments in index order (the tie case: DynamoDB orders equal SKs its own way, so an
    ExclusiveStartKey inside a run of equal SKs would not say where our order resumes).

    Every run of equal SKs that reaches the page's edge is read whole (one look-ahead item shows
    whether it does), then sorted by (SK, PK), so the pages partition the index order exactly.
    """
    need = skip + count
    kwargs = {
        "TableName": aws.table_name(),
        "IndexName": aws.product_index_name(),
        "ScanIndexForward": False,
        "ExpressionAttributeValues": {":sku": {"S": sku}},
        "KeyConditionExpression": "PK2 = :sku",
        "Limit": need + 1,
    }
    if after is not None and skip:
        kwargs["KeyConditionExpression"] = "PK2 = :sku AND SK <= :sk"
        kwargs["ExpressionAttributeValues"][":sk"] = {"S": after[1]}
    elif after is not None:
        kwargs["ExclusiveStartKey"] = {"PK2": {"S": sku}, "SK": {"S": after[1]}, "PK": {"S": after[0]}}
    client = aws.dynamodb()
    items: list[dict] = []
    exhausted = False
    while True:
        response = client.query(**kwargs)
        items.extend(response.get("Items", []))
        last_key = response.get("LastEvaluatedKey")
        if last_key is None:
            exhausted = True
            break
        if len(items) > need and items[-1]["SK"]["S"] != items[need - 1]["SK"]["S"]:
            break
        kwargs["ExclusiveStartKey"] = last_key
        kwargs["Limit"] = max(need + 1 - len(items), 10)
    comments = sorted(map(comment_from_item, items), key=lambda c: c.order_key, reverse=True)
    return comments[skip:need], exhausted and len(comments) <= need
