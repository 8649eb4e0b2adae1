"""What the endpoint knows of each table: its key schema and GSIs (from DescribeTable on DynamoDB
Local, unmetered, kept until the table changes), and whether it is still being created.

DynamoDB Local makes a table ACTIVE at once; AWS keeps a new table CREATING for a while (and a GSI
added by UpdateTable CREATING, backfilling, with the table UPDATING). Meanwhile AWS answers
data-plane calls on the table with ResourceNotFoundException (its API reference: "The resource might
not be specified correctly, or its status might not be ACTIVE"), UpdateTable/DeleteTable with
ResourceInUseException, and Query/Scan on a backfilling GSI with ValidationException."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from stack.strict_endpoint.errors import AwsError
from stack.strict_endpoint.upstream import Upstream, UpstreamError

CONTROL_PLANE = {"CreateTable", "DeleteTable", "DescribeTable", "UpdateTable", "ListTables", "DescribeTimeToLive",
                 "UpdateTimeToLive", "TagResource", "UntagResource", "ListTagsOfResource", "DescribeLimits",
                 "DescribeEndpoints", "DescribeContinuousBackups", "UpdateContinuousBackups"}
# A schema is described again after this long, in case the table changed behind the endpoint's back
# (created or given a GSI on DynamoDB Local directly).
SCHEMA_SECONDS = 10.0


@dataclass(frozen=True)
class Index:
    name: str
    keys: tuple[str, ...]  # hash key, then range key if any
    projection: str  # ALL, KEYS_ONLY, INCLUDE
    non_key: tuple[str, ...] = ()


@dataclass
class Schema:
    table: str
    keys: tuple[str, ...]
    indexes: dict[str, Index] = field(default_factory=dict)

    def key_of(self, item: dict) -> dict:
        return {name: item[name] for name in self.keys if name in item}

    def projected(self, index: Index, item: dict) -> dict:
        if index.projection == "ALL":
            return item
        names = set(self.keys) | set(index.keys) | set(index.non_key)
        return {name: value for name, value in item.items() if name in names}


class Tables:
    def __init__(self, upstream: Upstream):
        self.upstream = upstream
        self._schemas: dict[str, tuple[float, Schema]] = {}
        self._table_ready: dict[str, float] = {}
        self._index_ready: dict[tuple[str, str], float] = {}

    async def schema(self, table: str) -> Schema | None:
        kept = self._schemas.get(table)
        if kept is not None and time.monotonic() - kept[0] < SCHEMA_SECONDS:
            return kept[1]
        try:
            description = (await self.upstream.call("DescribeTable", {"TableName": table}))["Table"]
        except UpstreamError:
            return None
        keys = tuple(k["AttributeName"] for k in sorted(description["KeySchema"], key=lambda k: k["KeyType"]))
        indexes = {}
        for gsi in description.get("GlobalSecondaryIndexes", []):
            projection = gsi.get("Projection", {})
            indexes[gsi["IndexName"]] = Index(
                gsi["IndexName"], tuple(k["AttributeName"] for k in sorted(gsi["KeySchema"], key=lambda k: k["KeyType"])),
                projection.get("ProjectionType", "ALL"), tuple(projection.get("NonKeyAttributes", ())))
        schema = Schema(table, keys, indexes)
        self._schemas[table] = (time.monotonic(), schema)
        return schema

    def forget(self, table: str) -> None:
        self._schemas.pop(table, None)

    # --- CREATING ---------------------------------------------------------------------------------
    def creating(self, table: str, now: float) -> bool:
        return self._table_ready.get(table, 0) > now

    def backfilling(self, table: str, index: str, now: float) -> bool:
        return self._index_ready.get((table, index), 0) > now

    def check(self, operation: str, params: dict, tables: list[str], now: float) -> None:
        """The answer AWS gives a call on a table (or GSI) that is not ACTIVE yet, if this is one."""
        for table in tables:
            if not self.creating(table, now):
                continue
            if operation in ("UpdateTable", "DeleteTable"):
                raise AwsError("ResourceInUseException",
                               f"Attempt to change a resource which is still in use: Table is being created: {table}")
            if operation not in CONTROL_PLANE:
                raise AwsError("ResourceNotFoundException", "Requested resource not found")
        index = params.get("IndexName")
        if operation in ("Query", "Scan") and index and tables and self.backfilling(tables[0], index, now):
            raise AwsError("ValidationException", f"Cannot read from backfilling global secondary index: {index}")

    def after(self, operation: str, params: dict, body: dict, now: float, creating_seconds: float) -> bool:
        """Note what a successful control-plane answer changed; rewrite its TableDescription as AWS would
        show it. True when `body` was changed."""
        table = params.get("TableName")
        if operation in ("CreateTable", "UpdateTable", "DeleteTable"):
            self.forget(table)
        if operation == "CreateTable" and creating_seconds > 0:
            self._table_ready[table] = now + creating_seconds
        elif operation == "UpdateTable" and creating_seconds > 0:
            for update in params.get("GlobalSecondaryIndexUpdates", []):
                if "Create" in update:
                    self._index_ready[(table, update["Create"]["IndexName"])] = now + creating_seconds
        elif operation == "DeleteTable":
            self._table_ready.pop(table, None)
            for key in [key for key in self._index_ready if key[0] == table]:
                del self._index_ready[key]
        description = body.get("TableDescription") or body.get("Table")
        if not description or operation == "DeleteTable":
            return False
        return self.describe(description, now)

    def describe(self, description: dict, now: float) -> bool:
        table, changed = description.get("TableName"), False
        if self.creating(table, now):
            description["TableStatus"] = "CREATING"
            changed = True
        for gsi in description.get("GlobalSecondaryIndexes", []):
            if self.creating(table, now) or self.backfilling(table, gsi["IndexName"], now):
                gsi["IndexStatus"] = "CREATING"
                if not self.creating(table, now):
                    gsi["Backfilling"] = True
                    description["TableStatus"] = "UPDATING"
                changed = True
        return changed
