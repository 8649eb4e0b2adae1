"""What the DynamoDB index costs in capacity units, beside the other backends' bytes.

    python -m bench.dynamodb_cost            # one group of 20,000 entries
    python -m bench.dynamodb_cost --smoke    # 2,000 entries (CI)

On DynamoDB Local, every call the index makes asks ReturnConsumedCapacity=TOTAL; the units that come
back are summed as read units (GetItem, BatchGetItem, Query, Scan, TransactGetItems) or write units
(TransactWriteItems, BatchWriteItem), per operation: a page view at several depths (what a numbered
page past the fast window asks of the index: count() and at() of its first rank), count_newer (a
cursor or a filtered page), an append, an insert and a delete at several ranks from the newest end
(those past PAGINATION_INDEX_DYNAMODB_MAX_SHIFT page items mark the group), the background re-mark
that finishes them, and page views while the group is marked. Beside them, for the same entries
(bench.index_depth's catalogue: 32-hex members, microsecond sort keys): the DynamoDB index table's
bytes (DynamoDB's item size rules, plus the 100 bytes per item AWS bills for storage), and the
Redis, PostgreSQL and SQLite backends' bytes as bench.index_memory measures them.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path

from bench import index_depth, index_memory
from bench.common import DYNAMODB_LOCAL, format_table, machine_info, shown, stamp, write_json
from pagination_index.backends.dynamodb import DynamoDBIndex
from stack.dynamodb_local import DynamoDBLocal

PAGE = 20  # comments per page (COMMENTS_PAGE_SIZE's default)
SIZE, SMOKE_SIZE = 20_000, 2_000
GROUP = "bench-cost"
READS = {"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"}
WRITES = {"TransactWriteItems", "BatchWriteItem", "PutItem", "DeleteItem", "UpdateItem"}


def item_size(item: dict) -> int:
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


def units(size: int, unit: int) -> int:
    return max(1, -(-size // unit))


class Meter:
    """Adds ReturnConsumedCapacity=TOTAL to every call and sums what DynamoDB Local answers, as read
    or write units by the call's operation. Beside it, the units AWS's published rules give for the
    same calls (DynamoDB Local bills a transaction by its own rule, not 2 WCU per KB of each item):
    strongly consistent reads 1 RCU per 4 KB of each item read (a Query: of all it read; a missing
    item: 1), transactional reads 2 per 4 KB, transactional writes 2 WCU per KB of each item written
    (a Delete: counted as 1 KB), batch writes 1 per KB. Also counts the calls and items written."""

    def __init__(self, client):
        self.read = self.write = self.aws_read = self.aws_write = 0.0
        self.calls = self.items_written = 0
        client.meta.events.register("provide-client-params.dynamodb.*", self.ask)
        client.meta.events.register("after-call.dynamodb.*", self.add)

    def ask(self, params, model, **_):
        if model.name in READS | WRITES:
            params.setdefault("ReturnConsumedCapacity", "TOTAL")
            self.calls += 1
        if model.name == "TransactWriteItems":
            self.items_written += len(params["TransactItems"])
            for action in params["TransactItems"]:
                body = next(iter(action.values()))
                self.aws_write += 2 * units(item_size(body["Item"]) if "Item" in body else 1024, 1024)
        elif model.name == "BatchWriteItem":
            for requests in params["RequestItems"].values():
                self.items_written += len(requests)
                for request in requests:
                    self.aws_write += units(item_size(request["PutRequest"]["Item"]) if "PutRequest" in request else 1024, 1024)

    def add(self, parsed, model, **_):
        consumed = parsed.get("ConsumedCapacity") or []
        reported = sum(float(part.get("CapacityUnits", 0)) for part in (consumed if isinstance(consumed, list) else [consumed]))
        if model.name in WRITES:
            self.write += reported
            return
        self.read += reported
        if model.name == "GetItem":
            self.aws_read += units(item_size(parsed.get("Item") or {}), 4096)
        elif model.name in ("Query", "Scan"):
            self.aws_read += units(sum(item_size(item) for item in parsed.get("Items", [])), 4096)
        elif model.name == "BatchGetItem":
            self.aws_read += sum(units(item_size(item), 4096) for items in parsed.get("Responses", {}).values() for item in items)
        elif model.name == "TransactGetItems":
            self.aws_read += sum(2 * units(item_size(answer.get("Item") or {}), 4096) for answer in parsed.get("Responses", []))

    def measure(self, action) -> dict:
        before = (self.read, self.write, self.aws_read, self.aws_write, self.calls, self.items_written)
        action()
        return {"rcu": round(self.read - before[0], 2), "wcu": round(self.write - before[1], 2),
                "aws_rcu": round(self.aws_read - before[2], 2), "aws_wcu": round(self.aws_write - before[3], 2),
                "calls": self.calls - before[4], "items_written": self.items_written - before[5]}


def attribute_size(value: dict) -> int:
    """DynamoDB's size of an attribute value: strings their UTF-8 bytes, numbers about one byte per
    two digits plus one, lists and maps 3 bytes plus 1 per element plus the elements."""
    (kind, body), = value.items()
    if kind == "S":
        return len(body.encode())
    if kind == "N":
        return (len(body.lstrip("-").replace(".", "")) + 1) // 2 + 1
    if kind == "L":
        return 3 + sum(1 + attribute_size(element) for element in body)
    if kind == "M":
        return 3 + sum(1 + len(name.encode()) + attribute_size(element) for name, element in body.items())
    return len(str(body))


def table_bytes(index: DynamoDBIndex, group: str) -> dict:
    items = index._query(group)
    data = sum(item_size(item) for item in items)
    return {"items": len(items), "item_bytes": data, "billed_bytes": data + 100 * len(items),
            "detail": "DynamoDB item sizes of the group's stats, page and member items, + 100 B per item (AWS storage)"}


def other_backends(entries) -> dict:
    """bench.index_memory's measures of the same entries; a store that is not running is reported, not fatal."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="dynamodb-cost-") as workdir:
        measures = {"Redis": (index_depth.redis_store, lambda s: index_memory.redis_bytes(s, entries)),
                    "PostgreSQL": (index_depth.postgres_store, lambda s: index_memory.postgres_bytes(s, entries)),
                    "SQLite": (index_depth.sqlite_store,
                               lambda s: index_memory.sqlite_bytes(s, entries, Path(workdir) / "index.sqlite3"))}
        for name, (make_store, measure) in measures.items():
            try:
                store = make_store(Path(workdir))
                try:
                    results[name] = measure(store)
                finally:
                    store.close()
            except Exception as exc:  # reported in the table and the JSON
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SIZE:,} entries instead of {SIZE:,}")
    args = parser.parse_args(argv)
    size = SMOKE_SIZE if args.smoke else SIZE
    out = lambda text: print(text, flush=True)  # noqa: E731
    load = os.getloadavg()
    entries = index_depth.make_entries(size, seed=size)
    server = DynamoDBLocal().start()
    rows = []
    try:
        index = DynamoDBIndex({"ENDPOINT_URL": server.endpoint_url, "TABLE": f"bench-{uuid.uuid4().hex[:8]}"})
        index.create_table()
        out(f"loading {size:,} entries into one group ({index.page_size} per page item, MAX_SHIFT {index.max_shift})")
        index.replace(GROUP, entries)
        storage = table_bytes(index, GROUP)
        meter = Meter(index.client)
        ordered = sorted(entries, key=lambda entry: (entry[1], entry[0]), reverse=True)
        last_page = (size + PAGE - 1) // PAGE

        def page_views(label):
            for page in sorted({11, 100, last_page // 2, last_page}):
                rank = (page - 1) * PAGE
                rows.append([label, f"page {page:,} (rank {rank:,})",
                             meter.measure(lambda: (index.count(GROUP), index.at(GROUP, rank)))])

        def remark_all(label):
            pending = len(index._stats(GROUP).deltas)

            def run():
                while index.remark():
                    pass

            rows.append([label, f"{pending} marked page items", meter.measure(run)])

        page_views("page view")
        rows.append(["count_newer", "middle", meter.measure(lambda: index.count_newer(GROUP, *ordered[size // 2][::-1]))])
        rows.append(["append", "newest", meter.measure(lambda: index.add_many(GROUP, [("f" * 32, "9999")]))])
        ranks = sorted({10, 100, 400, 1_000, size // 2, size - 1})
        inserted = []
        for rank in ranks:  # rank r of the catalogue is rank r + 1 now (the append), + the inserts before it
            member, sort_key = ordered[rank]
            entry = (member + "x", sort_key)  # ties order by member: just newer than the catalogue's entry
            inserted.append(entry)
            rows.append(["insert", f"rank {rank:,}", meter.measure(lambda: index.add_many(GROUP, [entry]))])
        marked_by_inserts = len(index._stats(GROUP).deltas)
        page_views("page view, marked")
        rows.append(["count_newer, marked", "middle", meter.measure(lambda: index.count_newer(GROUP, *ordered[size // 2][::-1]))])
        remark_all("re-mark (background)")
        for rank, entry in zip(ranks, inserted):
            rows.append(["delete", f"rank {rank:,}", meter.measure(lambda: index.remove_many(GROUP, [entry[0]]))])
        remark_all("re-mark (background)")
        assert not index.marked_groups() and not index.check_integrity(GROUP)
        index.delete_table()
    finally:
        server.stop()
    out("measuring the other backends' bytes for the same entries (bench.index_memory)")
    others = other_backends(entries)
    cost = format_table(["operation", "where", "RCU", "WCU", "RCU (AWS rules)", "WCU (AWS rules)", "calls", "items written"],
                        [[a, b, f"{c['rcu']:g}", f"{c['wcu']:g}", f"{c['aws_rcu']:g}", f"{c['aws_wcu']:g}", str(c["calls"]),
                          str(c["items_written"])] for a, b, c in rows], left=2)
    stores = [["DynamoDB table (its own)", f"{storage['billed_bytes'] / size:.1f}", f"{storage['billed_bytes']:,}"]]
    for name, result in others.items():
        if "error" in result:
            stores.append([name, "not measured", result["error"][:60]])
        else:
            total = result.get("total_bytes", result.get("memory_usage_key"))
            stores.append([name, f"{result['bytes_per_entry']:.1f}", f"{total:,}"])
    bytes_table = format_table(["store", "bytes/entry", f"bytes for {size:,}"], stores)
    out(f"\nDynamoDB index, one group of {size:,} entries, {index.page_size} per page item, MAX_SHIFT {index.max_shift} "
        f"({DYNAMODB_LOCAL}; 2 cores shared with its JVM and other engineers' runs). RCU/WCU: as DynamoDB Local "
        "reports them (ReturnConsumedCapacity=TOTAL); AWS rules: the same calls billed by AWS's published rules")
    out(cost)
    out(f"\npage items marked by the middle inserts: {marked_by_inserts}; the same {size:,} entries in each store:")
    out(bytes_table)
    path = write_json("dynamodb_cost", args.smoke, stamp(), {
        "machine": machine_info({"DynamoDB Local": DYNAMODB_LOCAL}, load, "2 cores shared with DynamoDB Local's JVM"),
        "entries": size, "page_size": index.page_size, "max_shift": index.max_shift, "marked_by_inserts": marked_by_inserts,
        "rows": [{"operation": a, "where": b, **c} for a, b, c in rows], "dynamodb_storage": storage,
        "other_backends": others, "table": cost, "bytes_table": bytes_table})
    out(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
