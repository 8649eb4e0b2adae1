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
RATING_GROUP = "PK2R"  # "<SKU>/<rating>": the byRating GSI's partition key
# An item is in one group per grouping attribute it carries: its product's and its product-and-rating's.
# Each group is exactly one GSI partition, so a group read from the index and a Query agree.
GROUP_ATTRIBUTES = (GROUP, RATING_GROUP)
RATING_SEPARATOR = "/"  # SKUs cannot contain it (shop.models.Product.sku)


def rating_group(sku: str, rating: int) -> str:
    """The group (and PK2R value) of a product's comments with one rating."""
    return f"{sku}{RATING_SEPARATOR}{rating}"


def group_attribute(group: str) -> str:
    """Which attribute (and so which GSI) holds a group: PK2R for "SKU/rating", else PK2."""
    return RATING_GROUP if RATING_SEPARATOR in group else GROUP


def group_index_name(group: str) -> str:
    return aws.rating_index_name() if group_attribute(group) == RATING_GROUP else aws.product_index_name()


def image_entries(image: dict | None) -> dict[str, Entry]:
    """{group: (member, sort_key)} for every group a stream image belongs to."""
    if not image:
        return {}
    entry = image[MEMBER]["S"], image[SORT_KEY]["S"]
    return {image[attribute]["S"]: entry for attribute in GROUP_ATTRIBUTES if attribute in image}


def record_ops(record: dict) -> list[Op]:
    """The index ops for one DynamoDB Streams record (INSERT, MODIFY or REMOVE): the item leaves the
    groups it no longer belongs to (a changed rating moves it between rating groups) and is upserted
    into the groups whose entry is new or moved; a MODIFY that touched no key attribute makes none."""
    change = record["dynamodb"]
    old = image_entries(change.get("OldImage"))
    new = image_entries(change.get("NewImage"))
    ops: list[Op] = []
    for group, (member, sort_key) in old.items():
        if group not in new or new[group][0] != member:
            ops.append(Remove(group, member, sort_key))  # only while the entry still has this item's SK
    for group, entry in new.items():
        if old.get(group) != entry:
            ops.append(Add(group, *entry))
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
    """Every (member, sort_key) of one group, read from its GSI partition."""
    items = _paginate(
        aws.dynamodb().query,
        TableName=aws.table_name(),
        IndexName=group_index_name(group),
        KeyConditionExpression="#g = :g",
        ExpressionAttributeNames={"#g": group_attribute(group), "#m": MEMBER, "#s": SORT_KEY},
        ExpressionAttributeValues={":g": {"S": group}},
        ProjectionExpression="#m, #s",
    )
    for item in items:
        yield item[MEMBER]["S"], item[SORT_KEY]["S"]


def product_entries(sku: str) -> dict[str, list[Entry]]:
    """A product's group and its five rating groups (empty ones included, so a rebuild empties them),
    from one Query of the byProduct partition."""
    found: dict[str, list[Entry]] = {sku: [], **{rating_group(sku, rating): [] for rating in range(1, 6)}}
    items = _paginate(
        aws.dynamodb().query,
        TableName=aws.table_name(),
        IndexName=aws.product_index_name(),
        KeyConditionExpression="#g = :g",
        ExpressionAttributeNames={"#g": GROUP, "#r": RATING_GROUP, "#m": MEMBER, "#s": SORT_KEY},
        ExpressionAttributeValues={":g": {"S": sku}},
        ProjectionExpression="#g, #r, #m, #s",
    )
    for item in items:
        for group, entry in image_entries(item).items():
            found.setdefault(group, []).append(entry)
    return found


def group_count(group: str) -> int:
    """How many items the table holds for one group: a COUNT Query on its GSI, paged (reads them all)."""
    kwargs = {
        "TableName": aws.table_name(),
        "IndexName": group_index_name(group),
        "KeyConditionExpression": "#g = :g",
        "ExpressionAttributeNames": {"#g": group_attribute(group)},
        "ExpressionAttributeValues": {":g": {"S": group}},
        "Select": "COUNT",
    }
    total = 0
    while True:
        response = aws.dynamodb().query(**kwargs)
        total += response["Count"]
        if "LastEvaluatedKey" not in response:
            return total
        kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def _scan_segment(segment: int, segments: int, on_item=None) -> dict[str, list[Entry]]:
    found: dict[str, list[Entry]] = {}
    items = _paginate(
        aws.dynamodb().scan,
        TableName=aws.table_name(),
        Segment=segment,
        TotalSegments=segments,
        ExpressionAttributeNames={"#g": GROUP, "#r": RATING_GROUP, "#m": MEMBER, "#s": SORT_KEY},
        ProjectionExpression="#g, #r, #m, #s",
    )
    for item in items:
        for group, entry in image_entries(item).items():
            found.setdefault(group, []).append(entry)
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
