"""Sources: the tables (or GSIs) an index mirrors, declared in settings.PAGINATION_INDEX["SOURCES"].

A source is a DynamoDB table, or one of its GSIs, whose GROUP_KEY value names a group and whose
SORT_KEY orders it; SORT_KEY_BEGINS_WITH picks one item type of a single-table design. Each group
is one sorted set of the index, named `GROUP_PREFIX + value`. A source turns the table's stream
records into index ops, reads the table's truth for rebuild and verify, and reads a slice of a
group for pagination_index.query().

The order, everywhere: by sort key, then by member (the item's table key beside the sort key),
as text compared by code point. Number sort keys are written as text that sorts as the numbers do
(sortkeys.number_key). DynamoDB does not say how a GSI orders items with equal sort keys (DynamoDB
Local orders them by an internal hash), so every read completes a run of equal sort keys at its
edges and sorts it by member: pages partition this order exactly.

`BaseSource` is the contract (modelled on BaseIndex: the essentials raise NotImplementedError); a
source's "CLASS" setting may name a subclass of TableSource for what settings cannot say.
"""
from __future__ import annotations

import json
import threading
from contextlib import ContextDecorator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from botocore.exceptions import BotoCoreError, ClientError
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from pagination_index.backends.base import Add, Entry, Op, Remove
from pagination_index.capacity import ReadBudget
from pagination_index.conf import SOURCE_DEFAULTS, index_settings
from pagination_index.sortkeys import canonical_number, number_key


class InvalidSourceError(ImproperlyConfigured):
    pass


class NoStream(Exception):
    """The table has no stream to follow (its message says how to give it one)."""


class SourceUnavailable(Exception):
    """The table could not be read or written: a request is answered 503, a command reports it as an
    error, not a traceback."""


# A place to read a group from: (the sort key text of the boundary, how many items with that sort key
# the read skips, in the read's order); None: the group's first item.
Start = tuple[str, int] | None


@dataclass(frozen=True)
class Read:
    items: list[dict]  # DynamoDB items, as the wire gives them, in the read's order
    complete: bool  # the group holds nothing after these


class BaseSource:
    def __init__(self, name: str, options: dict | None = None):
        self.name = name
        self.options = dict(options or {})
        prefix = self.options.get("GROUP_PREFIX")
        self.group_prefix = f"{name}:" if prefix is None else prefix

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"

    # --- group names ------------------------------------------------------------------------
    def index_group(self, value: str) -> str:
        """The index's name of the group whose group key is `value`."""
        return f"{self.group_prefix}{value}"

    def group_value(self, group: str) -> str:
        return group[len(self.group_prefix):]

    def owns(self, group: str) -> bool:
        """Whether an index group is one of this source's (rebuild and verify find the groups the
        index holds that the table no longer does by it)."""
        return group.startswith(self.group_prefix)

    def named_groups(self, value: str) -> list[str]:
        """The index groups a command's --group VALUE means in this source: the one group of that
        value (a source whose groups derive from another's value may name several)."""
        return [self.index_group(value)]

    def cache_scope(self, group: str) -> str:
        """The name of the generation that versions what query() shares of a group (CACHE_SECONDS):
        invalidate() moves it on. Groups of one table that change together may share one (a product's
        and its rating groups'), so one write invalidates them all with one number."""
        return group

    # --- the stream ---------------------------------------------------------------------------
    @property
    def table(self) -> str:
        raise NotImplementedError("subclasses of BaseSource must provide a table attribute")

    def stream_arn(self) -> str:
        """The ARN of the table's current stream; raises NoStream if it has none."""
        raise NotImplementedError("subclasses of BaseSource must provide a stream_arn() method")

    def stream_client(self):
        """A boto3 `dynamodbstreams` client (or one with the same calls) for the stream."""
        raise NotImplementedError("subclasses of BaseSource must provide a stream_client() method")

    def record_ops(self, record: dict) -> list[Op]:
        """The index ops one stream record makes (none for a change no group of this source sees)."""
        raise NotImplementedError("subclasses of BaseSource must provide a record_ops() method")

    # --- the table's truth (rebuild_index, verify_index) --------------------------------------
    def groups(self, *, budget: ReadBudget | None = None, segments: int = 4) -> list[str]:
        """Every group the table holds items of, as index group names, sorted."""
        raise NotImplementedError("subclasses of BaseSource must provide a groups() method")

    def group_entries(self, group: str, *, budget: ReadBudget | None = None) -> Iterator[Entry]:
        """Every (member, sort key) of one group, newest first, streamed (memory stays flat)."""
        raise NotImplementedError("subclasses of BaseSource must provide a group_entries() method")

    def group_count(self, group: str) -> int:
        """How many items the table holds for one group."""
        return sum(1 for _ in self.group_entries(group))

    def has_items(self) -> bool:
        raise NotImplementedError("subclasses of BaseSource must provide a has_items() method")

    def approximate_item_count(self) -> int:
        """A cheap estimate of the table's size, for progress bars; 0 when unknown."""
        return 0

    # --- reads (pagination_index.sequence) -------------------------------------------------------
    def read(self, group: str, count: int, *, start: Start = None, newest_first: bool = True) -> Read:
        """`count` items of a group in the index's order (or its reverse), from `start`."""
        raise NotImplementedError("subclasses of BaseSource must provide a read() method")

    def entry(self, item: dict) -> Entry:
        """The (member, sort key) of one of the source's items, as the index holds it."""
        raise NotImplementedError("subclasses of BaseSource must provide an entry() method")

    def close(self) -> None:
        """Release connections; called when the sources are reset."""


# --- TableSource: a source from settings alone -------------------------------------------------
def _text(value: dict, what: str) -> str:
    """A key attribute's value as text: a string as it is, a number in its shortest form."""
    if "S" in value:
        return value["S"]
    if "N" in value:
        return canonical_number(value["N"])
    raise ValueError(f"{what} must be a string or a number, not {next(iter(value), '?')}")


def source_errors(what: str) -> "_SourceErrors":
    """Raise botocore's failures inside the block (or the decorated function) as SourceUnavailable,
    naming what was tried. Expected errors (a failed condition) are caught inside, before they get here."""
    return _SourceErrors(what)


class _SourceErrors(ContextDecorator):
    def __init__(self, what: str):
        self.what = what

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        if exc is not None and isinstance(exc, (BotoCoreError, ClientError)):
            raise SourceUnavailable(f"{self.what}: {exc}") from exc
        return False


class TableSource(BaseSource):
    """A source declared by settings (conf.SOURCE_DEFAULTS lists them)."""

    def __init__(self, name: str, options: dict | None = None):
        merged = {**SOURCE_DEFAULTS, **(options or {})}
        super().__init__(name, merged)
        for required in ("TABLE", "GROUP_KEY", "SORT_KEY"):
            if not merged.get(required):
                raise InvalidSourceError(f"source {name!r}: {required} is required")
        self._table = merged["TABLE"]
        self.gsi = merged["INDEX"]
        self.group_key = merged["GROUP_KEY"]
        self.sort_key = merged["SORT_KEY"]
        self.prefix = merged["SORT_KEY_BEGINS_WITH"] or None
        self.fast_items = int(merged["FAST_ITEMS"] or 0)
        self.cache_seconds = float(merged["CACHE_SECONDS"] or 0)
        self.cache_alias = merged["CACHE"]
        self._group_type = merged["GROUP_KEY_TYPE"]
        self._sort_type = merged["SORT_KEY_TYPE"]
        self._member_keys = merged["MEMBER_KEYS"]
        for setting in ("GROUP_KEY_TYPE", "SORT_KEY_TYPE"):
            if merged[setting] not in (None, "S", "N"):
                raise InvalidSourceError(f"source {name!r}: {setting} must be 'S' or 'N'")
        if self.prefix and self._sort_type == "N":
            raise InvalidSourceError(f"source {name!r}: SORT_KEY_BEGINS_WITH needs a string sort key")
        self._lock = threading.Lock()

    @property
    def table(self) -> str:
        return self._table

    # --- the key schema: from settings, else DescribeTable once --------------------------------
    def _describe(self) -> None:
        from pagination_index import aws

        with source_errors(f"DescribeTable {self.table}"):
            described = aws.shared_client("dynamodb", aws.BULK).describe_table(TableName=self.table)["Table"]
        types = {d["AttributeName"]: d["AttributeType"] for d in described["AttributeDefinitions"]}
        table_keys = [k["AttributeName"] for k in described["KeySchema"]]
        for attribute in (self.group_key, self.sort_key):
            if types.get(attribute) not in ("S", "N"):
                raise InvalidSourceError(f"source {self.name!r}: {attribute} of {self.table} must be a string or a "
                                         f"number key attribute (DescribeTable says {types.get(attribute)})")
        if self._group_type is None:
            self._group_type = types[self.group_key]
        if self._sort_type is None:
            self._sort_type = types[self.sort_key]
        if self._member_keys is None:
            self._member_keys = [key for key in table_keys if key not in (self.group_key, self.sort_key)]

    @property
    def group_type(self) -> str:
        if self._group_type is None:
            with self._lock:
                if self._group_type is None:
                    self._describe()
        return self._group_type

    @property
    def sort_type(self) -> str:
        if self._sort_type is None:
            with self._lock:
                if self._sort_type is None:
                    self._describe()
        return self._sort_type

    @property
    def member_keys(self) -> list[str]:
        if self._member_keys is None:
            with self._lock:
                if self._member_keys is None:
                    self._describe()
        return list(self._member_keys)

    # --- items to entries ---------------------------------------------------------------------
    def sort_text(self, value: dict) -> str:
        """A sort key attribute as index text (numbers as number_key)."""
        if "N" in value:
            return number_key(value["N"])
        if "S" in value:
            return value["S"]
        raise ValueError(f"source {self.name!r}: the sort key {self.sort_key} must be a string or a number")

    def sort_value(self, text: str) -> dict:
        """Index text back to the attribute value a key condition compares with."""
        if self.sort_type == "N":
            from pagination_index.sortkeys import key_number

            return {"N": str(key_number(text))}
        return {"S": text}

    def belongs(self, item: dict) -> bool:
        """Whether an item (or a stream image) is one of this source's: it has the group and sort
        keys (a GSI is sparse the same way), and the sort key's prefix when there is one."""
        value = item.get(self.sort_key)
        if value is None or self.group_key not in item:
            return False
        return self.prefix is None or value.get("S", "").startswith(self.prefix)

    def member(self, item: dict) -> str:
        keys = self.member_keys
        if not keys:  # the table key is the group and sort keys: the sort key tells items apart
            return self.sort_text(item[self.sort_key])
        if len(keys) == 1:
            return _text(item[keys[0]], keys[0])
        return json.dumps([_text(item[key], key) for key in keys], ensure_ascii=False, separators=(",", ":"))

    def entry(self, item: dict) -> Entry:
        return self.member(item), self.sort_text(item[self.sort_key])

    def group_of(self, item: dict) -> str:
        return self.index_group(_text(item[self.group_key], self.group_key))

    def image_entry(self, image: dict | None) -> tuple[str, Entry] | None:
        if not image or not self.belongs(image):
            return None
        return self.group_of(image), self.entry(image)

    # --- the stream ---------------------------------------------------------------------------
    def stream_arn(self) -> str:
        from pagination_index import aws

        with source_errors(f"DescribeTable {self.table}"):
            table = aws.shared_client("dynamodb", aws.BULK).describe_table(TableName=self.table)["Table"]
        arn = table.get("LatestStreamArn")
        if not arn:
            raise NoStream(f"Table {self.table!r} has no stream: enable one (NEW_AND_OLD_IMAGES) on it.")
        return arn

    def stream_client(self):
        from pagination_index import aws

        return aws.shared_client("dynamodbstreams", aws.BACKGROUND)

    def record_ops(self, record: dict) -> list[Op]:
        """INSERT, MODIFY or REMOVE: the item leaves the group it no longer belongs to (or its
        entry moves), and is upserted into the group whose entry is new or moved; a MODIFY that
        touched no key attribute makes none. A remove names the sort key it removes, so a REMOVE
        of an old item never deletes a newer item's entry of the same member."""
        change = record["dynamodb"]
        old = self.image_entry(change.get("OldImage"))
        new = self.image_entry(change.get("NewImage"))
        if old == new:
            return []
        ops: list[Op] = []
        if old is not None and (new is None or new[0] != old[0] or new[1][0] != old[1][0]):
            ops.append(Remove(old[0], old[1][0], old[1][1]))
        if new is not None:
            ops.append(Add(new[0], *new[1]))
        return ops

    # --- queries ------------------------------------------------------------------------------
    def _query_kwargs(self, value: str) -> dict:
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#g = :g",
            "ExpressionAttributeNames": {"#g": self.group_key},
            "ExpressionAttributeValues": {":g": self._group_value(value)},
        }
        if self.gsi:
            kwargs["IndexName"] = self.gsi
        return kwargs

    def _group_value(self, value: str) -> dict:
        # A number group key is named by its canonical text, which is also what DynamoDB accepts.
        return {self.group_type: value}

    def read(self, group: str, count: int, *, start: Start = None, newest_first: bool = True) -> Read:
        """`count` items from `start` in index order (newest first) or its reverse: one Query
        (continued while DynamoDB returns short). From a boundary the Query starts at the boundary's
        sort key, inclusive, and drops the first `skip` items with that sort key in the read's order
        (the boundary's run of ties up to itself): a key condition, so the read costs the same at any
        depth, and it only needs the sort key, which is what cursors carry.

        Every run of equal sort keys that reaches the read's edges is read whole (one look-ahead
        item tells whether it does) and sorted by member."""
        from pagination_index import aws

        kwargs = self._query_kwargs(self.group_value(group))
        kwargs["ScanIndexForward"] = not newest_first
        names, values = kwargs["ExpressionAttributeNames"], kwargs["ExpressionAttributeValues"]
        skip = 0
        if start is None:
            if self.prefix:
                kwargs["KeyConditionExpression"] += " AND begins_with(#s, :p)"
                names["#s"], values[":p"] = self.sort_key, {"S": self.prefix}
        else:
            boundary, skip = start
            names["#s"], values[":b"] = self.sort_key, self.sort_value(boundary)
            if newest_first and self.prefix:
                kwargs["KeyConditionExpression"] += " AND #s BETWEEN :p AND :b"
                values[":p"] = {"S": self.prefix}
            else:
                kwargs["KeyConditionExpression"] += f" AND #s {'<=' if newest_first else '>='} :b"
        need = skip + count
        kwargs["Limit"] = need + 1
        reads = aws.direct_reads()
        items: list[dict] = []
        exhausted = False
        with source_errors(f"Query of {self.name} group {group!r}"):
            while True:
                response = reads.query(**kwargs)
                page = response.get("Items", [])
                if self.prefix and not newest_first:
                    # Ascending past the item type's last key: an item that lacks the prefix ends it
                    # (a key condition holds one comparison; a filter may not name a key attribute).
                    kept = [item for item in page if item[self.sort_key].get("S", "").startswith(self.prefix)]
                    if len(kept) < len(page):
                        items.extend(kept)
                        exhausted = True
                        break
                items.extend(page)
                last_key = response.get("LastEvaluatedKey")
                if last_key is None:
                    exhausted = True
                    break
                if len(items) > need and self._sort_of(items[-1]) != self._sort_of(items[need - 1]):
                    break
                kwargs["ExclusiveStartKey"] = last_key
                kwargs["Limit"] = max(need + 1 - len(items), 10)
        if any(a[self.sort_key] == b[self.sort_key] for a, b in zip(items, items[1:])):
            items.sort(key=self._order_key, reverse=newest_first)  # runs of equal sort keys: by member
        return Read(items[skip:need], exhausted and len(items) <= need)

    def _sort_of(self, item: dict) -> str:
        return self.sort_text(item[self.sort_key])

    def _order_key(self, item: dict) -> tuple[str, str]:
        member, sort_key = self.entry(item)
        return sort_key, member

    def _paged(self, call, budget: ReadBudget | None, **kwargs) -> Iterator[dict]:
        """Every page of a Query or Scan, each page's consumed units spent from `budget`."""
        kwargs["ReturnConsumedCapacity"] = "TOTAL"
        budget = budget or ReadBudget()
        while True:
            response = call(**kwargs)
            budget.spend((response.get("ConsumedCapacity") or {}).get("CapacityUnits", 0.0))
            yield response
            if "LastEvaluatedKey" not in response:
                return
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def group_entries(self, group: str, *, budget: ReadBudget | None = None) -> Iterator[Entry]:
        from pagination_index import aws

        kwargs = self._query_kwargs(self.group_value(group))
        kwargs["ScanIndexForward"] = False
        if self.prefix:
            kwargs["KeyConditionExpression"] += " AND begins_with(#s, :p)"
            kwargs["ExpressionAttributeNames"]["#s"] = self.sort_key
            kwargs["ExpressionAttributeValues"][":p"] = {"S": self.prefix}
        keys = {self.sort_key, *self.member_keys}
        for n, key in enumerate(sorted(keys)):
            kwargs["ExpressionAttributeNames"][f"#k{n}"] = key
        kwargs["ProjectionExpression"] = ", ".join(f"#k{n}" for n in range(len(keys)))
        run: list[Entry] = []
        with source_errors(f"Query of {self.name} group {group!r}"):
            for response in self._paged(aws.shared_client("dynamodb", aws.BULK).query, budget, **kwargs):
                for item in response.get("Items", []):
                    entry = self.entry(item)
                    if run and entry[1] != run[0][1]:  # DynamoDB orders ties its own way: by member here
                        yield from sorted(run, reverse=True)
                        run = []
                    run.append(entry)
        yield from sorted(run, reverse=True)

    def groups(self, *, budget: ReadBudget | None = None, segments: int = 4) -> list[str]:
        """Every group the table holds items of: a parallel Scan of the GSI (or the table) reading only
        the keys. Memory: one name per group."""
        from pagination_index import aws

        def segment(number: int) -> set[str]:
            kwargs: dict[str, Any] = {
                "TableName": self.table, "Segment": number, "TotalSegments": segments,
                "ExpressionAttributeNames": {"#g": self.group_key}, "ProjectionExpression": "#g",
            }
            if self.gsi:
                kwargs["IndexName"] = self.gsi
            if self.prefix:  # a Scan, unlike a Query, may filter on a key attribute
                kwargs["FilterExpression"] = "begins_with(#s, :p)"
                kwargs["ExpressionAttributeNames"]["#s"] = self.sort_key
                kwargs["ExpressionAttributeValues"] = {":p": {"S": self.prefix}}
            found = set()
            with source_errors(f"Scan segment {number} of {segments} of {self.name}"):
                for response in self._paged(aws.shared_client("dynamodb", aws.BULK).scan, budget, **kwargs):
                    found.update(self.group_of(item) for item in response.get("Items", [])
                                 if self.group_key in item)
            return found

        with ThreadPoolExecutor(max_workers=segments) as pool:
            return sorted(set().union(*pool.map(segment, range(segments))))

    def group_count(self, group: str) -> int:
        """A COUNT Query of the group's partition, paged (DynamoDB still reads every item)."""
        from pagination_index import aws

        kwargs = self._query_kwargs(self.group_value(group))
        if self.prefix:
            kwargs["KeyConditionExpression"] += " AND begins_with(#s, :p)"
            kwargs["ExpressionAttributeNames"]["#s"] = self.sort_key
            kwargs["ExpressionAttributeValues"][":p"] = {"S": self.prefix}
        kwargs["Select"] = "COUNT"
        total = 0
        with source_errors(f"COUNT Query of {self.name} group {group!r}"):
            while True:
                response = aws.shared_client("dynamodb", aws.PAGE).query(**kwargs)
                total += response["Count"]
                if "LastEvaluatedKey" not in response:
                    return total
                kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def has_items(self) -> bool:
        from pagination_index import aws

        kwargs: dict[str, Any] = {"TableName": self.table, "Limit": 1}
        if self.gsi:
            kwargs["IndexName"] = self.gsi
        with source_errors(f"Scan of {self.name}"):
            return bool(aws.shared_client("dynamodb", aws.PAGE).scan(**kwargs).get("Items"))

    def approximate_item_count(self) -> int:
        """DescribeTable's ItemCount (the GSI's, for a GSI source): refreshed every few hours by
        DynamoDB, good for a progress bar."""
        from pagination_index import aws

        with source_errors(f"DescribeTable {self.table}"):
            table = aws.shared_client("dynamodb", aws.BULK).describe_table(TableName=self.table)["Table"]
        if self.gsi:
            for gsi in table.get("GlobalSecondaryIndexes", []):
                if gsi["IndexName"] == self.gsi:
                    return gsi.get("ItemCount", 0)
        return table.get("ItemCount", 0)


# --- The sources of settings.PAGINATION_INDEX["SOURCES"] ---------------------------------------
class SourceRegistry:
    """The declared sources by name, made on first use and again after the settings change."""

    def __init__(self):
        self._made: dict[str, BaseSource] | None = None
        self._lock = threading.Lock()

    def _all(self) -> dict[str, BaseSource]:
        made = self._made
        if made is None:
            with self._lock:
                if self._made is None:
                    self._made = {name: load_source(name, config)
                                  for name, config in (index_settings.SOURCES or {}).items()}
                made = self._made
        return made

    def __getitem__(self, name: str) -> BaseSource:
        try:
            return self._all()[name]
        except KeyError:
            raise InvalidSourceError(
                f"No source {name!r} in PAGINATION_INDEX['SOURCES'] (declared: {', '.join(self.names()) or 'none'})"
            ) from None

    def __iter__(self) -> Iterator[BaseSource]:
        return iter(self._all().values())

    def names(self) -> list[str]:
        return list(self._all())

    def for_table(self, table: str) -> list[BaseSource]:
        return [source for source in self if source.table == table]

    def by_table(self) -> dict[str, list[BaseSource]]:
        tables: dict[str, list[BaseSource]] = {}
        for source in self:
            tables.setdefault(source.table, []).append(source)
        return tables

    def owner_of(self, group: str) -> BaseSource | None:
        owners = [source for source in self if source.owns(group)]
        return owners[0] if len(owners) == 1 else None

    def reset(self) -> None:
        with self._lock:
            made, self._made = self._made, None
        for source in (made or {}).values():
            source.close()


def load_source(name: str, config: dict) -> BaseSource:
    if not isinstance(config, dict):
        raise InvalidSourceError(f"source {name!r} must be a dict")
    path = config.get("CLASS") or SOURCE_DEFAULTS["CLASS"]
    try:
        cls = import_string(path)
    except ImportError as exc:
        raise InvalidSourceError(f"source {name!r}: could not import CLASS {path!r}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, BaseSource)):
        raise InvalidSourceError(f"source {name!r}: CLASS {path!r} is not a subclass of BaseSource")
    return cls(name, config)


def records_ops(sources: Iterable[BaseSource], records: Iterable[dict]) -> list[Op]:
    """The ops stream records make for every source of their table, in record order."""
    sources = list(sources)
    return [op for record in records for source in sources for op in source.record_ops(record)]


def table_of_stream(arn: str) -> str:
    """arn:aws:dynamodb:REGION:ACCOUNT:table/NAME/stream/LABEL -> NAME."""
    return arn.split(":table/", 1)[-1].split("/stream/", 1)[0]
