"""The comments table as the pagination index sees it (settings.PAGINATION_INDEX_SOURCE).

Every comment is in two groups: its product's (PK2, GSI byProduct) and its product-and-rating's
(PK2R, GSI byRating); a member is its PK and a sort key its SK.
"""
from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator

from botocore.exceptions import ClientError

from comments.table import client
from comments.table.keys import (
    GROUP,
    GROUP_ATTRIBUTES,
    MEMBER,
    RATING_GROUP,
    RATING_SEPARATOR,
    SORT_KEY,
    group_attribute,
    group_index_name,
    product_groups,
    product_index_name,
    table_name,
)
from pagination_index import Add, BaseSource, Entry, NoStream, Op, ReadBudget, Remove

THROTTLE_CODES = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"})
THROTTLE_RETRIES = 10  # after botocore's own attempts; each waits longer (ReadBudget.throttled)

ENTRY_ATTRIBUTES = {"#g": GROUP, "#r": RATING_GROUP, "#m": MEMBER, "#s": SORT_KEY}
ENTRY_PROJECTION = "#g, #r, #m, #s"


def image_entries(image: dict | None) -> dict[str, Entry]:
    """{group: (member, sort_key)} for every group an item (or a stream image of one) belongs to."""
    if not image:
        return {}
    entry = image[MEMBER]["S"], image[SORT_KEY]["S"]
    return {image[attribute]["S"]: entry for attribute in GROUP_ATTRIBUTES if attribute in image}


def record_ops(record: dict) -> list[Op]:
    """The index ops for one stream record (INSERT, MODIFY or REMOVE): the item leaves the groups it
    no longer belongs to (a changed rating moves it between rating groups) and is upserted into the
    groups whose entry is new or moved; a MODIFY that touched no key attribute makes none."""
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


def paginate(call, **kwargs) -> Iterator[dict]:
    """Every item of a Query or Scan, following LastEvaluatedKey."""
    while True:
        response = call(**kwargs)
        yield from response.get("Items", [])
        if "LastEvaluatedKey" not in response:
            return
        kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def budgeted_responses(call, budget: ReadBudget, **kwargs) -> Iterator[dict]:
    """Every page of a Query or Scan, each page's consumed units spent from `budget`, throttles
    (once botocore's retries are spent) slowing the budget down and retried."""
    kwargs["ReturnConsumedCapacity"] = "TOTAL"
    while True:
        response = budgeted_call(call, budget, **kwargs)
        yield response
        if "LastEvaluatedKey" not in response:
            return
        kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def budgeted_call(call, budget: ReadBudget, **kwargs) -> dict:
    """One call that asked for ReturnConsumedCapacity, retried while throttled, its units spent."""
    attempt = 0
    while True:
        try:
            response = call(**kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in THROTTLE_CODES or attempt >= THROTTLE_RETRIES:
                raise
            budget.throttled(attempt)
            attempt += 1
            continue
        budget.spend((response.get("ConsumedCapacity") or {}).get("CapacityUnits", 0.0))
        return response


def budgeted_pages(call, budget: ReadBudget, **kwargs) -> Iterator[dict]:
    """Every item of a Query or Scan, read within `budget` (budgeted_responses)."""
    for response in budgeted_responses(call, budget, **kwargs):
        yield from response.get("Items", [])


def tie_runs(items: Iterable[dict]) -> Iterator[dict]:
    """Items of a newest-first GSI Query in the index's order: DynamoDB orders equal SKs its own
    way, the index by PK descending, so each run of equal SKs (short) is sorted here."""
    run: list[dict] = []
    for item in items:
        if run and item[SORT_KEY]["S"] != run[0][SORT_KEY]["S"]:
            yield from sorted(run, key=lambda i: i[MEMBER]["S"], reverse=True)
            run = []
        run.append(item)
    yield from sorted(run, key=lambda i: i[MEMBER]["S"], reverse=True)


def _spilled(spill) -> Iterator[Entry]:
    spill.seek(0)
    for line in spill:
        member, _, sort_key = line.rstrip("\n").partition("\t")
        yield member, sort_key


class CommentsTableSource(BaseSource):
    """OPTIONS: none; the table and GSI names come from settings.DYNAMODB."""

    def stream_arn(self) -> str:
        with client.store_errors("DescribeTable"):
            table = client.dynamodb_bulk().describe_table(TableName=table_name())["Table"]
        arn = table.get("LatestStreamArn")
        if not arn:
            raise NoStream(f"Table {table_name()!r} has no stream; run `manage.py create_tables`.")
        return arn

    def stream_client(self):
        return client.dynamodbstreams()

    def record_ops(self, record: dict) -> list[Op]:
        return record_ops(record)

    def group_entries(self, group: str) -> Iterator[Entry]:
        items = paginate(
            client.dynamodb_bulk().query,
            TableName=table_name(),
            IndexName=group_index_name(group),
            KeyConditionExpression="#g = :g",
            ExpressionAttributeNames={"#g": group_attribute(group), "#m": MEMBER, "#s": SORT_KEY},
            ExpressionAttributeValues={":g": {"S": group}},
            ProjectionExpression="#m, #s",
        )
        with client.store_errors(f"Query of group {group!r}"):
            for item in items:
                yield item[MEMBER]["S"], item[SORT_KEY]["S"]

    def units(self, *, budget: ReadBudget | None = None, segments: int = 4) -> list[str]:
        """Every SKU with comments, sorted: a parallel Scan of byProduct reading only its key (the
        table, not the catalogue, is the truth a rebuild restores). Memory: one name per product."""
        def segment(number: int) -> set[str]:
            items = budgeted_pages(
                client.dynamodb_bulk().scan, budget or ReadBudget(), TableName=table_name(),
                IndexName=product_index_name(), Segment=number, TotalSegments=segments,
                ProjectionExpression="#g", ExpressionAttributeNames={"#g": GROUP},
            )
            with client.store_errors(f"Scan segment {number} of {segments} of {product_index_name()}"):
                return {item[GROUP]["S"] for item in items}

        with ThreadPoolExecutor(max_workers=segments) as pool:
            return sorted(set().union(*pool.map(segment, range(segments))))

    def unit_of(self, group: str) -> str:
        return group.partition(RATING_SEPARATOR)[0]

    def unit_groups(self, unit: str) -> list[str]:
        return product_groups(unit)

    def unit_entries(self, unit: str, *, budget: ReadBudget | None = None) -> Iterator[tuple[str, Iterator[Entry]]]:
        """The product's group streamed newest first from one byProduct Query (DynamoDB returns the
        partition sorted), its rating entries spilled to temporary files on the way and streamed
        from them after: memory stays flat at any product size, and each item is read once."""
        spills = {group: tempfile.TemporaryFile("w+", encoding="utf-8") for group in product_groups(unit)[1:]}
        items = budgeted_pages(
            client.dynamodb_bulk().query, budget or ReadBudget(),
            TableName=table_name(), IndexName=product_index_name(), ScanIndexForward=False,
            KeyConditionExpression="#g = :g", ExpressionAttributeNames=ENTRY_ATTRIBUTES,
            ExpressionAttributeValues={":g": {"S": unit}}, ProjectionExpression=ENTRY_PROJECTION,
        )

        def product_entries() -> Iterator[Entry]:
            with client.store_errors(f"Query of product {unit!r}"):
                for item in tie_runs(items):
                    entry = item[MEMBER]["S"], item[SORT_KEY]["S"]
                    spill = spills.get(item.get(RATING_GROUP, {}).get("S"))
                    if spill is not None:
                        spill.write(f"{entry[0]}\t{entry[1]}\n")
                    yield entry

        try:
            yield unit, product_entries()
            for group, spill in spills.items():
                yield group, _spilled(spill)
        finally:
            for spill in spills.values():
                spill.close()

    def group_count(self, group: str) -> int:
        """A COUNT Query on the group's GSI partition, paged (DynamoDB still reads every item)."""
        kwargs = {
            "TableName": table_name(),
            "IndexName": group_index_name(group),
            "KeyConditionExpression": "#g = :g",
            "ExpressionAttributeNames": {"#g": group_attribute(group)},
            "ExpressionAttributeValues": {":g": {"S": group}},
            "Select": "COUNT",
        }
        total = 0
        with client.store_errors(f"COUNT Query of group {group!r}"):
            while True:
                response = client.dynamodb().query(**kwargs)  # the /ops/ page: a page's patience
                total += response["Count"]
                if "LastEvaluatedKey" not in response:
                    return total
                kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def has_items(self) -> bool:
        with client.store_errors("Scan"):
            response = client.dynamodb().scan(TableName=table_name(), Limit=1, ProjectionExpression="#m",
                                              ExpressionAttributeNames={"#m": MEMBER})
        return bool(response.get("Items"))

    def approximate_item_count(self) -> int:
        """DescribeTable's ItemCount: refreshed every few hours by DynamoDB, good for a progress bar."""
        with client.store_errors("DescribeTable"):
            return client.dynamodb_bulk().describe_table(TableName=table_name())["Table"].get("ItemCount", 0)
