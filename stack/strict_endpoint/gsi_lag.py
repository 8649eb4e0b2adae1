"""GSIs that lag their table, as AWS's do (the `gsi_view` hook).

AWS updates global secondary indexes asynchronously: a Query on a GSI may not yet see an item written
a moment ago, and may still see one deleted or changed a moment ago ("Read consistency for global
secondary indexes": eventually consistent reads only; "Global secondary indexes" under "Data
synchronization"). DynamoDB Local updates them synchronously. This view shows each GSI Query the
index as it stood `lag_seconds` ago: every item the table changed within the lag is shown in the
state it had before its first change within the lag (absent if it did not exist then), if that state
belongs in the index, matches the key condition and falls within the page the answer covers.

Limits: added-back items are not filtered by a FilterExpression; Select=COUNT answers are passed
through unchanged; the lag is judged by the machine's clock (not `clock_skew_seconds`).
Options: {"lag_seconds": L} at start-up or PATCH /hooks/gsi_view.
"""
from __future__ import annotations

import re
import time
from collections import deque
from decimal import Decimal

CONDITION = re.compile(r"^\s*\(?\s*([#\w.]+)\s*(=|<=|>=|<|>)\s*(:\w+)\s*\)?\s*$")
BETWEEN = re.compile(r"^\s*\(?\s*([#\w.]+)\s+BETWEEN\s+(:\w+)\s+AND\s+(:\w+)\s*\)?\s*$", re.IGNORECASE)
BEGINS_WITH = re.compile(r"^\s*\(?\s*begins_with\s*\(\s*([#\w.]+)\s*,\s*(:\w+)\s*\)\s*\)?\s*$", re.IGNORECASE)
SCHEMA_SECONDS = 5.0  # a table's key schemas are re-read this often (a table may be re-created)


class LaggingGsiView:
    def __init__(self, *, upstream, options: dict):
        self.upstream = upstream
        self.lag = 0.0
        self.writes: dict[str, deque] = {}  # table -> (at, table key, old item, new item)
        self.schemas: dict[str, tuple[float, dict]] = {}
        self.configure(options)

    def configure(self, options: dict) -> dict:
        unknown = set(options) - {"lag_seconds"}
        if unknown:
            raise ValueError(f"unknown gsi_view option(s): {', '.join(sorted(unknown))}")
        lag = float(options.get("lag_seconds", self.lag))
        if lag < 0:
            raise ValueError("lag_seconds must be >= 0")
        self.lag = lag
        return {"lag_seconds": self.lag}

    def status(self) -> dict:
        return {"lag_seconds": self.lag, "writes_held": {t: len(w) for t, w in self.writes.items()}}

    def record_write(self, table: str, old_item: dict | None, new_item: dict | None, at: float) -> None:
        if not self.lag:
            self.writes.pop(table, None)
            return
        now = time.time()
        writes = self.writes.setdefault(table, deque())
        writes.append((now, old_item, new_item))
        while writes and writes[0][0] < now - self.lag:
            writes.popleft()

    async def adjust_query(self, params: dict, response_body: dict) -> dict:
        table, index = params.get("TableName"), params.get("IndexName")
        writes = self.writes.get(table)
        if not self.lag or not writes or "Items" not in response_body:
            return response_body
        schema = await self._schema(table)
        if index not in schema["indexes"]:
            return response_body
        table_keys = schema["table"]
        index_keys, projection = schema["indexes"][index]
        cutoff = time.time() - self.lag
        # Each key changed within the lag: its state before the first of those changes.
        before: dict[tuple, dict | None] = {}
        for at, old, new in writes:
            if at < cutoff:
                continue
            key = _key(old or new, table_keys)
            before.setdefault(key, old)
        shown = [item for item in response_body["Items"] if _key(item, table_keys) not in before]
        condition = _key_condition(params)
        forward = params.get("ScanIndexForward", True)
        order = index_keys[1:] + table_keys

        def position(item):
            return tuple(_sortable(item.get(name)) for name in order)

        start = params.get("ExclusiveStartKey")
        end = response_body.get("LastEvaluatedKey")
        for state in before.values():
            if state is None or any(name not in state for name in index_keys) or not condition(state):
                continue
            at = position(state)
            if start and (at <= position(start) if forward else at >= position(start)):
                continue
            if end and (at > position(end) if forward else at < position(end)):
                continue
            shown.append(_project(state, index_keys + table_keys, projection, params))
        shown.sort(key=position, reverse=not forward)
        answer = {**response_body, "Items": shown, "Count": len(shown)}
        limit = params.get("Limit")
        if limit and len(shown) > limit:
            answer["Items"] = shown = shown[:limit]
            answer["Count"] = limit
            answer["LastEvaluatedKey"] = {name: shown[-1][name] for name in index_keys + table_keys
                                          if name in shown[-1]}
        return answer

    async def _schema(self, table: str) -> dict:
        cached = self.schemas.get(table)
        if cached and time.time() - cached[0] < SCHEMA_SECONDS:
            return cached[1]
        description = (await self.upstream.call("DescribeTable", {"TableName": table}))["Table"]
        schema = {"table": _names(description["KeySchema"]), "indexes": {
            index["IndexName"]: (_names(index["KeySchema"]), index.get("Projection", {}))
            for index in description.get("GlobalSecondaryIndexes", [])}}
        self.schemas[table] = (time.time(), schema)
        return schema


def _names(key_schema: list[dict]) -> list[str]:
    return [k["AttributeName"] for k in sorted(key_schema, key=lambda k: k["KeyType"] != "HASH")]


def _key(item: dict, names: list[str]) -> tuple:
    return tuple(tuple(sorted(item[name].items())) if name in item else None for name in names)


def _sortable(value: dict | None):
    if value is None:
        return (0, "")
    (kind, raw), = value.items()
    return (1, Decimal(raw)) if kind == "N" else (1, raw)


def _key_condition(params: dict):
    """A predicate for KeyConditionExpression (`a = :v [AND b op :w | b BETWEEN :x AND :y |
    begins_with(b, :p)]`); one that accepts nothing when the expression is not of that form."""
    names, values = params.get("ExpressionAttributeNames", {}), params.get("ExpressionAttributeValues", {})
    parts = re.split(r"\s+AND\s+", params.get("KeyConditionExpression", ""), flags=re.IGNORECASE)
    joined = []
    for part in parts:  # put BETWEEN's own AND back
        if joined and re.search(r"\bBETWEEN\s+:\w+\s*$", joined[-1], re.IGNORECASE):
            joined[-1] += " AND " + part
        else:
            joined.append(part)
    tests = []
    for part in joined:
        if match := CONDITION.match(part):
            tests.append((names.get(match[1], match[1]), match[2], [values.get(match[3])]))
        elif match := BETWEEN.match(part):
            tests.append((names.get(match[1], match[1]), "BETWEEN", [values.get(match[2]), values.get(match[3])]))
        elif match := BEGINS_WITH.match(part):
            tests.append((names.get(match[1], match[1]), "begins_with", [values.get(match[2])]))
        else:
            return lambda item: False
    compare = {"=": lambda a, b: a == b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
               ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}

    def matches(item: dict) -> bool:
        for name, op, operands in tests:
            if name not in item or None in operands:
                return False
            value, wanted = _sortable(item[name]), [_sortable(o) for o in operands]
            if op == "BETWEEN":
                ok = wanted[0] <= value <= wanted[1]
            elif op == "begins_with":
                ok = isinstance(value[1], str) and value[1].startswith(wanted[0][1])
            else:
                ok = compare[op](value, wanted[0])
            if not ok:
                return False
        return True

    return matches


def _project(item: dict, keys: list[str], projection: dict, params: dict) -> dict:
    """What the index holds of `item` (its projection), then what the request asked for."""
    kind = projection.get("ProjectionType", "ALL")
    if kind == "KEYS_ONLY":
        item = {name: item[name] for name in keys if name in item}
    elif kind == "INCLUDE":
        kept = set(keys) | set(projection.get("NonKeyAttributes", []))
        item = {name: value for name, value in item.items() if name in kept}
    expression = params.get("ProjectionExpression")
    if expression:
        names = params.get("ExpressionAttributeNames", {})
        wanted = {names.get(p, p) for p in (re.split(r"[.\[]", path.strip())[0] for path in expression.split(","))}
        item = {name: value for name, value in item.items() if name in wanted}
    return item
