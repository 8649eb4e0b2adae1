"""Read and write units by AWS's published rules (developer guide: "DynamoDB item sizes and formats",
"DynamoDB read and write operations", "Capacity management for transactions", "Provisioned throughput
considerations for global secondary indexes").

- Item size: the UTF-8 length of every attribute name plus its value: strings their UTF-8 bytes,
  numbers 1 byte per two significant digits plus 1, binaries their raw bytes, booleans and nulls 1,
  lists and maps 3 bytes plus 1 per element plus the elements, sets the sum of their members.
- Reads: 4 KB units. GetItem and each BatchGetItem/TransactGetItems item: the whole item's size rounded
  up on its own (a missing item still costs one unit); Query and Scan: the sizes of every item evaluated
  (before any filter; projections do not help) summed and rounded up once per request (at least one
  unit). Eventually consistent reads (the default, and always on a GSI) cost half; transactional reads
  twice.
- Writes: 1 KB units on the larger of the item before and after (a failed condition still costs the
  old item's size, at least one unit); transactional writes twice. Each GSI whose entry a write
  adds, changes or removes costs 1 write of the projected entry's size, 2 (delete and put) when the
  GSI key changes; a write that changes nothing the GSI projects costs it nothing.

The endpoint reads what it needs of old and full items from DynamoDB Local directly (unmetered)."""
from __future__ import annotations

import base64
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass

from stack.strict_endpoint.tables import Schema, Tables
from stack.strict_endpoint.upstream import Upstream, UpstreamError

READ_UNIT, WRITE_UNIT = 4096, 1024
PROJECTING = ("ProjectionExpression", "AttributesToGet")


def number_size(text: str) -> int:
    digits = text.lstrip("+-").replace(".", "")
    mantissa = digits.split("e")[0].split("E")[0]
    significant = mantissa.strip("0") or "0"
    return math.ceil(len(significant) / 2) + 1


def value_size(value: dict) -> int:
    (kind, data), = value.items()
    if kind == "S":
        return len(data.encode())
    if kind == "N":
        return number_size(data)
    if kind == "B":
        return len(base64.b64decode(data))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(member.encode()) for member in data)
    if kind == "NS":
        return sum(number_size(member) for member in data)
    if kind == "BS":
        return sum(len(base64.b64decode(member)) for member in data)
    if kind == "L":
        return 3 + sum(1 + value_size(element) for element in data)
    if kind == "M":
        return 3 + sum(1 + len(name.encode()) + value_size(element) for name, element in data.items())
    raise ValueError(f"unknown attribute type {kind}")


def item_size(item: dict | None) -> int:
    return sum(len(name.encode()) + value_size(value) for name, value in (item or {}).items())


def read_units(size: int, *, consistent: bool = False, transactional: bool = False) -> float:
    units = max(1, math.ceil(size / READ_UNIT))
    return units * 2 if transactional else units if consistent else units / 2


def write_units(size: int, *, transactional: bool = False) -> float:
    units = max(1, math.ceil(size / WRITE_UNIT))
    return units * 2 if transactional else units


@dataclass
class Charge:
    """Units one request consumed on one table or index, and the partition key value they fell on."""
    table: str
    index: str | None
    read: float = 0.0
    write: float = 0.0
    partition: str | None = None  # the partition key's value, as JSON text, when the charge has one
    change: tuple[dict | None, dict | None] | None = None  # (old item, new item) of a table write

    @property
    def resource(self) -> str:
        return f"{self.table}/index/{self.index}" if self.index else self.table


class Meter:
    """Units by operation, by table/index, by access key and by X-Request-Tag."""

    DIMENSIONS = ("operation", "resource", "key_id", "request_id")

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.total = {"read": 0.0, "write": 0.0, "requests": 0}
        self.by = {dimension: defaultdict(lambda: {"read": 0.0, "write": 0.0, "requests": 0})
                   for dimension in self.DIMENSIONS}

    def record(self, *, operation: str, key_id: str | None, request_id: str | None, charges: list[Charge]) -> None:
        read, write = sum(c.read for c in charges), sum(c.write for c in charges)
        values = {"operation": operation, "key_id": key_id or "-", "request_id": request_id}
        for dimension, value in values.items():
            if value is not None:
                bucket = self.by[dimension][value]
                bucket["read"] += read
                bucket["write"] += write
                bucket["requests"] += 1
        for charge in charges:
            bucket = self.by["resource"][charge.resource]
            bucket["read"] += charge.read
            bucket["write"] += charge.write
        for resource in {charge.resource for charge in charges}:
            self.by["resource"][resource]["requests"] += 1
        self.total["read"] += read
        self.total["write"] += write
        self.total["requests"] += 1

    def snapshot(self) -> dict:
        return {"total": dict(self.total), **{f"by_{d}": {k: dict(v) for k, v in self.by[d].items()}
                                               for d in self.DIMENSIONS}}


def partition_value(schema: Schema | None, key: dict | None, names: tuple[str, ...] | None = None) -> str | None:
    if not key:
        return None
    names = names or (schema.keys if schema else ())
    if not names or names[0] not in key:
        return None
    return json.dumps(key[names[0]], sort_keys=True)


KEY_EQUALS = re.compile(r"(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)")
PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")


def query_partition(params: dict, hash_key: str) -> dict | None:
    """The `hash key = :value` of a Query's KeyConditionExpression, as a one-attribute key."""
    names = params.get("ExpressionAttributeNames", {})
    values = params.get("ExpressionAttributeValues", {})
    for name, placeholder in KEY_EQUALS.findall(params.get("KeyConditionExpression", "")):
        if names.get(name, name) == hash_key and placeholder in values:
            return {hash_key: values[placeholder]}
    for name, condition in params.get("KeyConditions", {}).items():  # the legacy parameter
        if name == hash_key and condition.get("AttributeValueList"):
            return {hash_key: condition["AttributeValueList"][0]}
    return None


class Metering:
    """Works out a request's charges: `before()` reads the old items a write will replace, `after()`
    prices the answer."""

    def __init__(self, upstream: Upstream, tables: Tables):
        self.upstream, self.tables = upstream, tables

    async def _get(self, table: str, key: dict) -> dict | None:
        try:
            answer = await self.upstream.call("GetItem", {"TableName": table, "Key": key, "ConsistentRead": True})
        except UpstreamError:
            return None
        return answer.get("Item")

    async def _get_many(self, table: str, keys: list[dict]) -> dict[str, dict]:
        """Full items by key (JSON of the key), in chunks of 100, following UnprocessedKeys."""
        found: dict[str, dict] = {}
        schema = await self.tables.schema(table)
        unique = list({json.dumps(k, sort_keys=True): k for k in keys}.values())
        for start in range(0, len(unique), 100):
            request = {table: {"Keys": unique[start:start + 100], "ConsistentRead": True}}
            while request:
                try:
                    answer = await self.upstream.call("BatchGetItem", {"RequestItems": request})
                except UpstreamError:
                    break
                for item in answer.get("Responses", {}).get(table, []):
                    found[json.dumps(schema.key_of(item), sort_keys=True)] = item
                request = answer.get("UnprocessedKeys") or None
        return found

    # --- before the request ---------------------------------------------------------------------
    async def before(self, operation: str, params: dict) -> dict:
        """The old items of every item a write names: {(table, key json): item or None}."""
        wanted: list[tuple[str, dict]] = []
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            schema = await self.tables.schema(params["TableName"])
            if schema:
                key = params.get("Key") or schema.key_of(params.get("Item", {}))
                wanted.append((params["TableName"], key))
        elif operation == "BatchWriteItem":
            for table, requests in params.get("RequestItems", {}).items():
                schema = await self.tables.schema(table)
                for request in requests if schema else []:
                    if "PutRequest" in request:
                        wanted.append((table, schema.key_of(request["PutRequest"]["Item"])))
                    elif "DeleteRequest" in request:
                        wanted.append((table, request["DeleteRequest"]["Key"]))
        elif operation == "TransactWriteItems":
            for item in params.get("TransactItems", []):
                (kind, body), = item.items()
                schema = await self.tables.schema(body["TableName"])
                if schema:
                    wanted.append((body["TableName"], body.get("Key") or schema.key_of(body.get("Item", {}))))
        old: dict = {}
        by_table: dict[str, list[dict]] = defaultdict(list)
        for table, key in wanted:
            by_table[table].append(key)
        for table, keys in by_table.items():
            items = await self._get_many(table, keys) if len(keys) > 1 else {
                json.dumps(keys[0], sort_keys=True): await self._get(table, keys[0])}
            for key in keys:
                text = json.dumps(key, sort_keys=True)
                old[(table, text)] = items.get(text)
        return old

    # --- after the answer ---------------------------------------------------------------------------
    async def after(self, operation: str, params: dict, status: int, body: dict, old: dict,
                    error: str | None) -> list[Charge]:
        if operation == "GetItem":
            return await self._get_item(params, body)
        if operation == "BatchGetItem":
            return await self._batch_get(params, body)
        if operation == "TransactGetItems" and status == 200:
            return await self._transact_get(params, body)
        if operation in ("Query", "Scan") and status == 200:
            return await self._query(operation, params, body)
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            if status != 200 and error != "ConditionalCheckFailedException":
                return []
            return await self._single_write(operation, params, old, succeeded=status == 200)
        if operation == "BatchWriteItem" and status == 200:
            return await self._batch_write(params, body, old)
        if operation == "TransactWriteItems" and status == 200:
            return await self._transact_write(params, old)
        return []

    async def _get_item(self, params, body) -> list[Charge]:
        table = params["TableName"]
        item = body.get("Item")
        if item is not None and any(p in params for p in PROJECTING):
            item = await self._get(table, params["Key"])
        schema = await self.tables.schema(table)
        return [Charge(table, None, read=read_units(item_size(item), consistent=bool(params.get("ConsistentRead"))),
                       partition=partition_value(schema, params["Key"]))]

    async def _batch_get(self, params, body) -> list[Charge]:
        charges = []
        for table, request in params.get("RequestItems", {}).items():
            unprocessed = {json.dumps(k, sort_keys=True)
                           for k in body.get("UnprocessedKeys", {}).get(table, {}).get("Keys", [])}
            keys = [k for k in request.get("Keys", []) if json.dumps(k, sort_keys=True) not in unprocessed]
            full = await self._get_many(table, keys)
            schema = await self.tables.schema(table)
            for key in keys:
                size = item_size(full.get(json.dumps(key, sort_keys=True)))
                charges.append(Charge(table, None, read=read_units(size, consistent=bool(request.get("ConsistentRead"))),
                                      partition=partition_value(schema, key)))
        return charges

    async def _transact_get(self, params, body) -> list[Charge]:
        charges = []
        for entry in params.get("TransactItems", []):
            get = entry["Get"]
            item = await self._get(get["TableName"], get["Key"])
            schema = await self.tables.schema(get["TableName"])
            charges.append(Charge(get["TableName"], None, read=read_units(item_size(item), transactional=True),
                                  partition=partition_value(schema, get["Key"])))
        return charges

    async def _query(self, operation, params, body) -> list[Charge]:
        table, index_name = params["TableName"], params.get("IndexName")
        schema = await self.tables.schema(table)
        index = schema.indexes.get(index_name) if schema and index_name else None
        items = body.get("Items")
        trimmed = any(p in params for p in (*PROJECTING, "FilterExpression", "QueryFilter", "ScanFilter")) or \
            params.get("Select", "ALL_ATTRIBUTES") not in ("ALL_ATTRIBUTES", "ALL_PROJECTED_ATTRIBUTES")
        if trimmed or items is None:
            items = await self._evaluated(operation, params, index)
        size = sum(item_size(item) for item in items)
        consistent = bool(params.get("ConsistentRead")) and index is None
        partition = None
        if operation == "Query" and schema:
            hash_key = index.keys[0] if index else schema.keys[0]
            partition = partition_value(schema, query_partition(params, hash_key), (hash_key,))
        return [Charge(table, index_name, read=read_units(size, consistent=consistent), partition=partition)]

    async def _evaluated(self, operation, params, index) -> list[dict]:
        """The items the request evaluated, whole: the same call without filter or projection (so
        the same Limit and 1 MB page), its placeholders pruned to those the key condition uses."""
        kept = {key: params[key] for key in ("TableName", "IndexName", "KeyConditionExpression", "KeyConditions",
                                             "ExclusiveStartKey", "Limit", "ScanIndexForward", "ConsistentRead",
                                             "Segment", "TotalSegments") if key in params}
        used = set(PLACEHOLDER.findall(params.get("KeyConditionExpression", "")))
        for key in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
            pruned = {name: value for name, value in params.get(key, {}).items() if name in used}
            if pruned:
                kept[key] = pruned
        if index is not None and index.projection != "ALL":
            kept["Select"] = "ALL_PROJECTED_ATTRIBUTES"
        try:
            return (await self.upstream.call(operation, kept)).get("Items", [])
        except UpstreamError:
            return []

    async def _writes(self, table: str, key: dict, old: dict | None, new: dict | None, *,
                      transactional: bool = False) -> list[Charge]:
        schema = await self.tables.schema(table)
        charges = [Charge(table, None, write=write_units(max(item_size(old), item_size(new)),
                                                         transactional=transactional),
                          partition=partition_value(schema, key), change=(old, new))]
        for index in (schema.indexes.values() if schema else ()):
            charges += gsi_charges(schema, index, old, new)
        return charges

    async def _single_write(self, operation, params, old_items, *, succeeded: bool) -> list[Charge]:
        table = params["TableName"]
        schema = await self.tables.schema(table)
        if schema is None:
            return []
        key = params.get("Key") or schema.key_of(params.get("Item", {}))
        old = old_items.get((table, json.dumps(key, sort_keys=True)))
        if not succeeded:  # a failed condition: the old item's size, nothing written to any GSI
            return [Charge(table, None, write=write_units(item_size(old)), partition=partition_value(schema, key))]
        new = params["Item"] if operation == "PutItem" else None if operation == "DeleteItem" else \
            await self._get(table, key)
        return await self._writes(table, key, old, new)

    async def _batch_write(self, params, body, old_items) -> list[Charge]:
        charges = []
        for table, requests in params.get("RequestItems", {}).items():
            schema = await self.tables.schema(table)
            if schema is None:
                continue
            unprocessed = {json.dumps(r, sort_keys=True) for r in body.get("UnprocessedItems", {}).get(table, [])}
            for request in requests:
                if json.dumps(request, sort_keys=True) in unprocessed:
                    continue
                if "PutRequest" in request:
                    new = request["PutRequest"]["Item"]
                    key = schema.key_of(new)
                else:
                    new, key = None, request["DeleteRequest"]["Key"]
                charges += await self._writes(table, key, old_items.get((table, json.dumps(key, sort_keys=True))), new)
        return charges

    async def _transact_write(self, params, old_items) -> list[Charge]:
        charges = []
        for entry in params.get("TransactItems", []):
            (kind, body), = entry.items()
            table = body["TableName"]
            schema = await self.tables.schema(table)
            if schema is None:
                continue
            key = body.get("Key") or schema.key_of(body.get("Item", {}))
            old = old_items.get((table, json.dumps(key, sort_keys=True)))
            if kind == "ConditionCheck":
                charges.append(Charge(table, None, write=write_units(item_size(old), transactional=True),
                                      partition=partition_value(schema, key)))
                continue
            new = body["Item"] if kind == "Put" else None if kind == "Delete" else await self._get(table, key)
            charges += await self._writes(table, key, old, new, transactional=True)
        return charges


def gsi_charges(schema: Schema, index, old: dict | None, new: dict | None) -> list[Charge]:
    """The GSI writes one item's change causes (their partitions are the GSI key values)."""
    def entry(item):
        if item is None or not all(name in item for name in index.keys):
            return None
        return schema.projected(index, item)

    def key(item):
        return tuple(sorted((name, str(item[name])) for name in index.keys))

    before, after = entry(old), entry(new)
    if before is None and after is None:
        return []
    charge = lambda item: Charge(schema.table, index.name, write=write_units(item_size(item)),  # noqa: E731
                                 partition=partition_value(None, item, index.keys))
    if before is None:
        return [charge(after)]
    if after is None:
        return [charge(before)]
    if key(before) != key(after):
        return [charge(before), charge(after)]
    if before == after:
        return []
    bigger = before if item_size(before) >= item_size(after) else after
    return [charge(bigger)]


async def request_partitions(tables: Tables, operation: str, params: dict, old: dict) -> list[tuple]:
    """The (table, index, "read"/"write", key value) partitions a request will use, known before it is
    answered: its keys, and for writes the GSI keys of the old items and of the items put."""
    found: list[tuple] = []

    async def write(table: str, key: dict, new: dict | None) -> None:
        schema = await tables.schema(table)
        if schema is None:
            return
        found.append((table, None, "write", partition_value(schema, key)))
        old_item = old.get((table, json.dumps(key, sort_keys=True)))
        for index in schema.indexes.values():
            for item in (old_item, new):
                if item and index.keys[0] in item:
                    found.append((table, index.name, "write", partition_value(None, item, index.keys)))

    async def read(table: str, key: dict | None, index_name: str | None = None) -> None:
        schema = await tables.schema(table)
        if schema is None or key is None:
            return
        names = schema.indexes[index_name].keys if index_name in schema.indexes else schema.keys
        found.append((table, index_name, "read", partition_value(schema, key, names)))

    if operation == "GetItem":
        await read(params["TableName"], params.get("Key"))
    elif operation == "BatchGetItem":
        for table, request in params.get("RequestItems", {}).items():
            for key in request.get("Keys", []):
                await read(table, key)
    elif operation == "TransactGetItems":
        for entry in params.get("TransactItems", []):
            await read(entry["Get"]["TableName"], entry["Get"]["Key"])
    elif operation == "Query":
        schema = await tables.schema(params["TableName"])
        if schema:
            index = schema.indexes.get(params.get("IndexName"))
            hash_key = index.keys[0] if index else schema.keys[0]
            await read(params["TableName"], query_partition(params, hash_key), params.get("IndexName"))
    elif operation in ("PutItem", "UpdateItem", "DeleteItem"):
        schema = await tables.schema(params["TableName"])
        if schema:
            await write(params["TableName"], params.get("Key") or schema.key_of(params.get("Item", {})), params.get("Item"))
    elif operation == "BatchWriteItem":
        for table, requests in params.get("RequestItems", {}).items():
            schema = await tables.schema(table)
            for request in requests if schema else []:
                if "PutRequest" in request:
                    item = request["PutRequest"]["Item"]
                    await write(table, schema.key_of(item), item)
                elif "DeleteRequest" in request:
                    await write(table, request["DeleteRequest"]["Key"], None)
    elif operation == "TransactWriteItems":
        for entry in params.get("TransactItems", []):
            (kind, body), = entry.items()
            schema = await tables.schema(body["TableName"])
            if schema:
                await write(body["TableName"], body.get("Key") or schema.key_of(body.get("Item", {})), body.get("Item"))
    return [p for p in dict.fromkeys(found) if p[3] is not None]


SINGLE_TABLE = {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan"}


def consumed_capacity(operation: str, mode: str, charges: list[Charge]) -> dict | list | None:
    """The ConsumedCapacity member AWS returns for ReturnConsumedCapacity=TOTAL or INDEXES, from the
    endpoint's own charges (DynamoDB Local's figures are not AWS's): one entry per table, with the
    table's and each GSI's share under INDEXES."""
    if mode not in ("TOTAL", "INDEXES"):
        return None
    tables: dict[str, dict] = {}
    for charge in charges:
        entry = tables.setdefault(charge.table, {"TableName": charge.table, "CapacityUnits": 0.0,
                                                 "ReadCapacityUnits": 0.0, "WriteCapacityUnits": 0.0})
        entry["CapacityUnits"] += charge.read + charge.write
        entry["ReadCapacityUnits"] += charge.read
        entry["WriteCapacityUnits"] += charge.write
        if mode == "INDEXES":
            part = entry.setdefault("Table", {"CapacityUnits": 0.0, "ReadCapacityUnits": 0.0, "WriteCapacityUnits": 0.0}) \
                if charge.index is None else \
                entry.setdefault("GlobalSecondaryIndexes", {}).setdefault(
                    charge.index, {"CapacityUnits": 0.0, "ReadCapacityUnits": 0.0, "WriteCapacityUnits": 0.0})
            part["CapacityUnits"] += charge.read + charge.write
            part["ReadCapacityUnits"] += charge.read
            part["WriteCapacityUnits"] += charge.write
    entries = list(tables.values())
    if operation in SINGLE_TABLE:
        return entries[0] if entries else None
    return entries
