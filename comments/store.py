"""The comments table's items and writes. Items are (de)serialised by hand: our attributes are only S
and N, and this is on the hot path of every page (comment_from_item is the query() transform of the
product pages). Pages are read through pagination_index.query() (comments/selectors.py). Any
DynamoDB failure leaves here as StoreUnavailable (comments.table.client)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable

from botocore.exceptions import ClientError

from comments.table.client import dynamodb, dynamodb_bulk, store_errors
from comments.table.keys import rating_group, table_name
from pagination_index import ReadBudget
from pagination_index.aws.retries import batch_write
from pagination_index.sortkeys import SORT_KEY_FORMAT

# The English month names Django's `date:"F"` writes (the site is in English), by month number.
MONTHS = {number: name for number, name in enumerate(
    ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
     "December"), start=1)}

BATCH_WRITE_MAX = 25


@dataclass(frozen=True, slots=True)
class Comment:
    pk: str
    sk: str
    sku: str
    author: str
    body: str
    rating: int

    # What pages show of the date, from the SK's text (a page shows 20 comments, three dates each:
    # parsing and the date filter were a tenth of a page's render time). Templates get the comment
    # itself: Jinja2 finds an attribute at the first try (a dict's key only after a failed getattr).
    @property
    def created_html(self) -> str:
        """A valid HTML `datetime`: UTC, milliseconds (HTML allows at most three digits)."""
        return f"{self.sk[:23]}Z"

    @property
    def created_day(self) -> str:
        """"5 March 2024"."""
        return f"{int(self.sk[8:10])} {MONTHS[int(self.sk[5:7])]} {self.sk[:4]}"

    @property
    def created_title(self) -> str:
        """"5 March 2024, 13:04:05" (UTC)."""
        return f"{self.created_day}, {self.sk[11:19]}"

    @property
    def stars(self) -> str:
        """4 -> "★★★★☆" (decoration: pages give the number as text for screen readers)."""
        rating = max(0, min(self.rating, 5))
        return "★" * rating + "☆" * (5 - rating)

    @property
    def rating_group(self) -> str:
        """The byRating partition (and index group) this comment is in: PK2R."""
        return rating_group(self.sku, self.rating)

    @property
    def order_key(self) -> tuple[str, str]:
        """Index order: by SK, ties broken by PK; newest first is this, descending."""
        return self.sk, self.pk


def format_sk(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime(SORT_KEY_FORMAT)


def parse_sk(sk: str) -> datetime:
    return datetime.strptime(sk, SORT_KEY_FORMAT).replace(tzinfo=timezone.utc)


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
        "PK2R": {"S": comment.rating_group},
        "author": {"S": comment.author},
        "body": {"S": comment.body},
        "rating": {"N": str(comment.rating)},
    }


@store_errors("BatchWriteItem")
def put_comments(comments: Iterable[Comment]) -> int:
    """BatchWriteItem in groups of 25 (seeding, benchmarks: the bulk client), unprocessed items sent
    again with backoff (aws.retries); returns items written."""
    client = dynamodb_bulk()
    table = table_name()
    batch: list[dict] = []
    written = 0

    def flush(requests: list[dict]) -> None:
        batch_write(client, {table: requests})

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


@store_errors("PutItem")
def put_new_comment(comment: Comment) -> None:
    """PutItem that never overwrites: the condition fails if the key is taken.

    The client retries after timeouts, so a condition failure can be our own first attempt that
    did land: the item that is there is returned and, if it is this comment, that is success.
    """
    item = item_from_comment(comment)
    try:
        dynamodb().put_item(
            TableName=table_name(),
            Item=item,
            ConditionExpression="attribute_not_exists(PK)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        if exc.response.get("Item") != item:
            raise CommentExists(comment.pk) from exc


@store_errors("GetItem")
def get_comment(pk: str, sk: str) -> Comment | None:
    """One shown comment by its table key, strongly consistent (unlike any read of the GSI)."""
    response = dynamodb().get_item(
        TableName=table_name(), Key={"PK": {"S": pk}, "SK": {"S": sk}}, ConsistentRead=True,
    )
    item = response.get("Item")
    # An item without PK2 is in no product's pages: hidden by moderation (moderation/table.py).
    return comment_from_item(item) if item and "PK2" in item else None


@store_errors("Scan for rating keys")
def rating_key_updates(*, segment: int, segments: int, dry_run: bool = False, start: dict | None = None,
                       reads: ReadBudget | None = None, writes: ReadBudget | None = None,
                       on_page=None) -> tuple[int, int]:
    """One Scan segment from `start`: set PK2R on every comment that lacks it; returns (found, updated).
    on_page(scanned, next_start) follows each page (progress, and the checkpoint --resume reads;
    next_start is None at the segment's end). Reads and writes are spent from their budgets;
    throttled calls are retried by the bulk client's adaptive mode.

    The condition `attribute_not_exists(PK2R) AND attribute_exists(PK)` keeps the update from
    overwriting a PK2R written meanwhile (a new rating) or resurrecting a deleted comment.
    """
    client = dynamodb_bulk()
    reads, writes = reads or ReadBudget(), writes or ReadBudget()
    kwargs = {
        "TableName": table_name(),
        "Segment": segment,
        "TotalSegments": segments,
        "FilterExpression": "attribute_not_exists(PK2R) AND attribute_exists(PK2) AND attribute_exists(rating)",
        "ProjectionExpression": "PK, SK, PK2, rating",
        **({"ExclusiveStartKey": start} if start else {}),
    }
    found = updated = 0
    kwargs["ReturnConsumedCapacity"] = "TOTAL"
    while True:
        response = client.scan(**kwargs)
        reads.spend((response.get("ConsumedCapacity") or {}).get("CapacityUnits", 0.0))
        for item in response.get("Items", []):
            found += 1
            if dry_run:
                continue
            try:
                written = client.update_item(
                    TableName=table_name(),
                    Key={"PK": item["PK"], "SK": item["SK"]},
                    UpdateExpression="SET PK2R = :g",
                    ConditionExpression="attribute_not_exists(PK2R) AND attribute_exists(PK)",
                    ExpressionAttributeValues={":g": {"S": rating_group(item["PK2"]["S"], int(item["rating"]["N"]))}},
                    ReturnConsumedCapacity="TOTAL",
                )
                writes.spend((written.get("ConsumedCapacity") or {}).get("CapacityUnits", 0.0))
                updated += 1
            except client.exceptions.ConditionalCheckFailedException:
                pass
        if on_page:
            on_page(response.get("ScannedCount", 0), response.get("LastEvaluatedKey"))
        if "LastEvaluatedKey" not in response:
            return found, updated
        kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]
