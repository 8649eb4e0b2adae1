"""Capacity units the DynamoDB index consumes (ReturnConsumedCapacity=TOTAL) per page view at
several depths, per appended comment, and per insert/delete at several distances from the newest
end, on DynamoDB Local. Usage: python -m bench.dynamodb_cost [--smoke]"""
from __future__ import annotations

import argparse
import os
import uuid

from bench.common import DYNAMODB_LOCAL, format_table, machine_info, stamp, write_json
from pagination_index.backends.dynamodb import DynamoDBIndex
from stack.dynamodb_local import DynamoDBLocal

PAGE = 20  # comments per page view (COMMENTS_PAGE_SIZE's default)


class Meter:
    """Adds ReturnConsumedCapacity=TOTAL to every call and sums what comes back."""

    def __init__(self, client):
        self.units = 0.0
        self.written = 0  # items in write requests: DynamoDB Local reports 2 units per transaction, whatever its size
        for operation in ("GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems", "TransactWriteItems", "BatchWriteItem"):
            client.meta.events.register(f"provide-client-params.dynamodb.{operation}", self.ask)
        client.meta.events.register("after-call.dynamodb.*", self.add)

    def ask(self, params, model, **_):
        params.setdefault("ReturnConsumedCapacity", "TOTAL")
        if model.name == "TransactWriteItems":
            self.written += len(params["TransactItems"])
        elif model.name == "BatchWriteItem":
            self.written += sum(len(requests) for requests in params["RequestItems"].values())

    def add(self, parsed, **_):
        consumed = parsed.get("ConsumedCapacity") or []
        for part in consumed if isinstance(consumed, list) else [consumed]:
            self.units += float(part.get("CapacityUnits", 0))

    def measure(self, action) -> tuple[float, int]:
        before, written = self.units, self.written
        action()
        return round(self.units - before, 2), self.written - written


def sk(n: int) -> str:
    return f"2021-08-25T{n // 3600000:02d}:{n // 60000 % 60:02d}:{n // 1000 % 60:02d}.{n % 1000:03d}000Z"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a small group (CI)")
    args = parser.parse_args()
    size = 400 if args.smoke else 5000
    load = os.getloadavg()
    server = DynamoDBLocal().start()
    try:
        index = DynamoDBIndex({"ENDPOINT_URL": server.endpoint_url, "TABLE": f"bench-{uuid.uuid4().hex[:8]}"})
        index.create_table()
        index.replace("g", [(f"m{n:06d}", sk(n * 10)) for n in range(size)])
        meter = Meter(index.client)
        rows = []
        for depth in (1, 10, size // PAGE // 2, size // PAGE):
            rows.append(["page view", f"page {depth}", meter.measure(lambda: index.range("g", (depth - 1) * PAGE, depth * PAGE))])
        rows.append(["count", "", meter.measure(lambda: index.count("g"))])
        rows.append(["append", "newest", meter.measure(lambda: index.add_many("g", [("new", sk(size * 10 + 1))]))])
        for rank in (10, 100, size // 2, size - 1):
            entry = index.at("g", rank)
            rows.append(["insert", f"rank {rank}", meter.measure(lambda: index.add_many("g", [("x", entry[1][:-2] + "5Z")]))])
            rows.append(["delete", f"rank {rank}", meter.measure(lambda: index.remove_many("g", ["x"]))])
        index.delete_table()
    finally:
        server.stop()
    print(f"DynamoDB index, group of {size} entries, 20 per page item ({DYNAMODB_LOCAL}; 2 cores shared with "
          "its JVM and other engineers' runs; capacity units are DynamoDB Local's figures)")
    print(format_table(["operation", "where", "capacity units", "items written"], [[a, b, f"{c[0]:g}", str(c[1])] for a, b, c in rows], left=2))
    path = write_json("dynamodb_cost", args.smoke, stamp(), {
        "machine": machine_info({"DynamoDB Local": DYNAMODB_LOCAL}, load, "2 cores shared with DynamoDB Local's JVM"),
        "group_size": size, "rows": [{"operation": a, "where": b, "capacity_units": c[0], "items_written": c[1]} for a, b, c in rows]})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
