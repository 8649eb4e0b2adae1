"""The comments table as the index sees it: which attributes make a group, a member and a sort key.

The index knows the table only through settings and these attribute names; it never imports the
comments app.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from pagination_index import aws
from pagination_index.backends.base import Add, Entry, Op, Remove

MEMBER = "PK"  # comment id
SORT_KEY = "SK"  # creation time, ISO-8601 UTC with microseconds
GROUP = "PK2"  # product SKU


def image_entry(image: dict | None) -> tuple[str, str, str] | None:
    """(group, member, sort_key) of a stream image, or None when it belongs to no group."""
    if not image or GROUP not in image:
        return None
    return image[GROUP]["S"], image[MEMBER]["S"], image[SORT_KEY]["S"]


def record_ops(record: dict) -> list[Op]:
    """The index ops for one DynamoDB Streams record (INSERT, MODIFY or REMOVE)."""
    change = record["dynamodb"]
    old = image_entry(change.get("OldImage"))
    new = image_entry(change.get("NewImage"))
    if old == new:
        return []  # MODIFY that touched neither the group nor the sort key
    ops: list[Op] = []
    if old and (new is None or old[:2] != new[:2]):
        ops.append(Remove(old[0], old[1], old[2]))
    if new:
        ops.append(Add(*new))
    return ops


def records_ops(records: list[dict]) -> list[Op]:
    return [op for record in records for op in record_ops(record)]


def _paginate(call, **kwargs) -> Iterator[dict]:
    while True:
        response = call(**kwargs)
        yield from response.get("Items", [])
        if "LastEvaluatedKey" not in response:
            return
        kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def group_entries(group: str) -> Iterator[Entry]:
    """Every (member, sort_key) of one group, read from the GSI."""
    items = _paginate(
        aws.dynamodb().query,
        TableName=aws.table_name(),
        IndexName=aws.product_index_name(),
        KeyConditionExpression="#g = :g",
        ExpressionAttributeNames={"#g": GROUP, "#m": MEMBER, "#s": SORT_KEY},
        ExpressionAttributeValues={":g": {"S": group}},
        ProjectionExpression="#m, #s",
    )
    for item in items:
        yield item[MEMBER]["S"], item[SORT_KEY]["S"]


def _scan_segment(segment: int, segments: int, on_item=None) -> dict[str, list[Entry]]:
    found: dict[str, list[Entry]] = {}
    items = _paginate(
        aws.dynamodb().scan,
        TableName=aws.table_name(),
        Segment=segment,
        TotalSegments=segments,
        ExpressionAttributeNames={"#g": GROUP, "#m": MEMBER, "#s": SORT_KEY},
        ProjectionExpression="#g, #m, #s",
    )
    for item in items:
        if GROUP in item:
            found.setdefault(item[GROUP]["S"], []).append((item[MEMBER]["S"], item[SORT_KEY]["S"]))
        if on_item:
            on_item()
    return found


def all_entries(segments: int = 4, on_item=None) -> dict[str, list[Entry]]:
    """Every group's entries, by a parallel Scan of the table; on_item() is called per item read
    (from the Scan's threads)."""
    merged: dict[str, list[Entry]] = {}
    with ThreadPoolExecutor(max_workers=segments) as pool:
        for part in pool.map(_scan_segment, range(segments), [segments] * segments, [on_item] * segments):
            for group, entries in part.items():
                merged.setdefault(group, []).extend(entries)
    return merged


def table_has_items() -> bool:
    response = aws.dynamodb().scan(TableName=aws.table_name(), Limit=1, ProjectionExpression="#m",
                                   ExpressionAttributeNames={"#m": MEMBER})
    return bool(response.get("Items"))


def approximate_item_count() -> int:
    """DescribeTable's ItemCount: refreshed every few hours by DynamoDB, good for a progress bar."""
    return aws.dynamodb().describe_table(TableName=aws.table_name())["Table"].get("ItemCount", 0)


def stream_arn() -> str | None:
    table = aws.dynamodb().describe_table(TableName=aws.table_name())["Table"]
    return table.get("LatestStreamArn")
