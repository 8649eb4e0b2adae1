"""PAGINATION_INDEX_BACKEND=dynamodb: the index in a DynamoDB table of its own.

Per group, in one partition (key `g` = the group, sort key `p`):

- the stats item (`p = "s"`): count `c`, version `v` (+1 per write), generation `G`, number of page
  items `n`, and `d`, the size deltas of "marked" pages (below);
- page items (`p = "p<generation>:<page>"`): page k holds the entries ranked k*P .. k*P+P-1 counted
  from the OLDEST, as two lists (members `m`, sort keys `k`); the page number of a rank is arithmetic;
- member items (`p = "m<generation>:<member>"`, sort key `k`): where a member is, so an upsert or
  an unconditional remove finds the entry to move without reading the group.

Counting from the oldest means an append touches the stats item, the newest page item and the
member item; an insert or delete at page k shifts one entry through pages k..n-1. When that would
touch more than MAX_SHIFT page items, the write changes page k only and records its size delta in
the stats item: page starts are then k*P plus the deltas of the pages before (computed from the
stats item, no extra read), and `remark()` (run by sync_index between polls) shifts the entries
back into exact pages MAX_SHIFT pages per transaction. Every write is one TransactWriteItems
conditioned on the stats version (two consumers: the loser re-reads and retries; a redelivered
batch finds its entries in place and writes nothing). A batch with many changes to one group is
applied in steps of at most STEP_CHANGES changes, one transaction each (a step that would still
touch more than 100 items is halved); only replace() (rebuild) and repairs write the group anew in
a fresh generation and flip the stats item to it. See docs/backends-dynamodb.md.

Errors: the code below lets botocore's errors through; BaseIndex's funnel on every public method
(`unavailable_errors`) is the one place that turns them into IndexUnavailable. A cancelled
transaction is read by its reasons (`cancellation`): a lost race is retried with backoff, a
throttle is the store being unavailable, a ValidationError (an item over 400 KB) is
InvalidIndexWrite and never retried.
"""
from __future__ import annotations

import hashlib
import logging
import secrets
import struct
import tempfile
from collections import deque
from typing import Callable, Iterable, Iterator, Sequence

from botocore.exceptions import BotoCoreError, ClientError

from pagination_index import aws
from pagination_index.aws.retries import KeptConflicting, batch_get, batch_write, optimistic

from .base import Entry, NetWriteIndex, Removal, batched, chunked, is_newer, newest_first

logger = logging.getLogger(__name__)

STATS = "s"
MARKED = "\x00marked"  # the partition listing marked groups (p = the group): what remark() has to do
# The partition listing groups whose pages only a rewrite can make exact again (p = the group): left by a
# re-mark that may not rewrite (Lambda's maintain), picked up by sync_index's maintain(), verify_index
# --repair (check_integrity reports it) or rebuild_index (every rewrite clears it).
REPAIR = "\x00repair"
# The partition listing every non-empty group (p = the group), written in the transaction that
# creates or empties the group's stats item: groups() and is_empty() read it instead of a Scan of the
# whole table. Its item REGISTRY_COMPLETE says that it lists every group (a table made before it was
# filled once by create_table(); until then groups() scans, as before).
GROUPS = "\x00groups"
REGISTRY_COMPLETE = "\x00complete"
WALK_PAGE = 500  # items per Query page when a group is walked: what one response holds in memory
WRITE_CHUNK = 500  # put/delete requests gathered before they go out as BatchWriteItems of 25
TRANSACTION_ITEMS = 100
STEP_CHANGES = 90  # changes to one group per transaction (issue 29: never a rewrite for a large batch)
REMARK_ITEMS = 90  # page items the re-mark's last step may write (the stats item and the list go with them)
GENERATION_LIMIT = 10**9
# Bytes of entries one page item may hold. DynamoDB refuses an item over 400 KB (Service quotas,
# "Item size"); a marked page grows with every insert into it, and the re-mark carries what pages
# grew by towards the newest end. Both keep each page item under this bound (far under the limit:
# every write of a page item is billed a unit per KB, so a big one is expensive as well as fatal).
PAGE_ITEM_BYTES = 64 * 1024
# Marked pages the stats item may list (about 12 bytes each in `d`): the stats item is read on every
# page view and must stay far under 400 KB too, however many page items a group has.
MARKED_PAGES = 1000
# CancellationReasons codes that mean another writer got there first (or nothing happened to that item).
RACE_REASONS = frozenset({"None", "ConditionalCheckFailed", "TransactionConflict"})


class LostRace(Exception):
    """Another writer changed the group between this write's reads and its transaction."""


class PageFull(Exception):
    """A write would take a marked page item past PAGE_ITEM_BYTES, or mark more than MARKED_PAGES page
    items: re-mark the group first."""


class InvalidIndexWrite(ValueError):
    """DynamoDB refused a write as invalid (e.g. an item over 400 KB): retrying cannot help, and it is
    not an outage to wait out, so it is not IndexUnavailable."""


def cancellation(exc: ClientError) -> Exception:
    """What a failed TransactWriteItems means, from its CancellationReasons (TransactWriteItems
    reference: a cancelled transaction lists one reason per item, "None" for the items that were fine):
    LostRace, InvalidIndexWrite, or the error itself (a throttle: the store is unavailable)."""
    code = exc.response["Error"]["Code"]
    if code == "TransactionConflictException":
        return LostRace(str(exc))
    if code == "ValidationException":  # e.g. "Item size has exceeded the maximum allowed size": a design error
        return InvalidIndexWrite(f"DynamoDB refused the index write as invalid: {exc}")
    if code != "TransactionCanceledException":
        return exc
    reasons = {reason.get("Code", "None") for reason in exc.response.get("CancellationReasons", [])}
    if "ValidationError" in reasons:
        return InvalidIndexWrite(f"DynamoDB refused the index write as invalid: {exc}")
    if reasons <= RACE_REASONS:
        return LostRace(str(exc))
    return exc  # ThrottlingError, ProvisionedThroughputExceeded, ...: the store is not answering


DIGEST_MODULUS = 2**64


def entry_digest(entry: Entry) -> int:
    """An entry's 64-bit hash: the sum of a set's is an order-free digest of it (check_integrity)."""
    return int.from_bytes(hashlib.blake2b("\x00".join(entry).encode(), digest_size=8).digest(), "big")


def page_key(generation: int, page: int) -> str:
    return f"p{generation:010d}:{page:010d}"


def member_key(generation: int, member: str) -> str:
    return f"m{generation:010d}:{member}"


def older(a: Entry, b: Entry) -> bool:
    """Whether entry a comes before entry b counted from the oldest (sort key, then member)."""
    return (a[1], a[0]) < (b[1], b[0])


def entries_bytes(entries: Sequence[Entry]) -> int:
    """What a page item's entries add to its size: each member and sort key as a string element of a
    list (its UTF-8 bytes and 1 byte: DynamoDB's item size rules)."""
    return sum(len(member.encode()) + len(key.encode()) + 2 for member, key in entries)


def spread(entries: list[Entry], size: int, span: int, most: int) -> tuple[int, list[list[Entry]]]:
    """The re-mark's layout of a run of page items: `span` pages, as many as possible (at most
    `most`) exact ones of `size` first, then the rest spread evenly enough over the remaining pages
    that none passes PAGE_ITEM_BYTES (piled on one page, what a region grew by rolled on towards
    the newest end and grew past 400 KB: issue 42). Returns (exact pages, the pages' entries);
    (0, []) when no exact page fits."""
    # An exact page holds `size` entries: no more of them than the entries fill.
    for full in range(min(most, span - 1 if span > 1 else 1, len(entries) // size), 0, -1):
        rest = entries[full * size:]
        per = max(size, -(-len(rest) // (span - full)))
        pages = [entries[i * size:(i + 1) * size] for i in range(full)]
        pages += [rest[i:i + per] for i in range(0, per * (span - full), per)]
        if all(entries_bytes(page) <= PAGE_ITEM_BYTES for page in pages) and sum(map(len, pages)) == len(entries):
            return full, pages
    return 0, []


class Stats:
    """A group's stats item, and the page geometry it defines."""

    def __init__(self, item: dict | None, page_size: int):
        self.size = page_size
        self.exists = bool(item)
        item = item or {}
        self.count = int(item.get("c", {}).get("N", 0))
        self.version = int(item.get("v", {}).get("N", 0))
        self.generation = int(item.get("G", {}).get("N", 0))
        self.pages = int(item.get("n", {}).get("N", 0))
        self.deltas = {int(k): int(v["N"]) for k, v in item.get("d", {}).get("M", {}).items()}

    def copy(self) -> "Stats":
        other = Stats(None, self.size)
        other.__dict__.update(self.__dict__, deltas=dict(self.deltas))
        return other

    @property
    def marked(self) -> bool:
        return bool(self.deltas)

    def start(self, page: int) -> int:
        """Position (from the oldest) of the first entry of a page."""
        return page * self.size + sum(delta for k, delta in self.deltas.items() if k < page)

    def length(self, page: int) -> int:
        if page == self.pages - 1:
            return self.count - self.start(page)
        return self.size + self.deltas.get(page, 0)

    def locate(self, position: int) -> int:
        """The page holding a position (0 <= position < count): O(marked pages), no reads."""
        offset, first = 0, 0
        for k in sorted(self.deltas):
            if position < (k + 1) * self.size + offset + self.deltas[k]:
                return max(first, min((position - offset) // self.size, k))
            offset += self.deltas[k]
            first = k + 1
        return max(first, min((position - offset) // self.size, self.pages - 1))

    def item(self, group: str) -> dict:
        item = {"g": {"S": group}, "p": {"S": STATS}, "c": {"N": str(self.count)}, "v": {"N": str(self.version + 1)},
                "G": {"N": str(self.generation)}, "n": {"N": str(self.pages)}}
        if self.deltas:
            item["d"] = {"M": {str(k): {"N": str(v)} for k, v in self.deltas.items()}}
        return item


class DynamoDBIndex(NetWriteIndex):
    """OPTIONS: TABLE, ENDPOINT_URL, REGION, PAGE_SIZE, MAX_SHIFT, CONNECT_TIMEOUT, READ_TIMEOUT, MAX_ATTEMPTS.

    Two clients from the client layer (aws/), on boto3's credential chain: reads fail fast within
    MAX_ATTEMPTS (pages), writes (sync_index, rebuild) retry patiently in botocore's standard mode."""

    unavailable_errors = (BotoCoreError, ClientError, KeptConflicting)
    error_label = "dynamodb index"

    def __init__(self, options: dict | None = None):
        super().__init__(options)
        self.table = self.options.get("TABLE", "pagination-index")
        self.page_size = int(self.options.get("PAGE_SIZE", 20))
        # Page items one write may shift; more, and the group is marked for remark(). At most 90:
        # a transaction holds 100 items (the stats item, the pages, member items).
        self.max_shift = max(1, min(int(self.options.get("MAX_SHIFT", 20)), 90))
        # REGION, ENDPOINT_URL and the timeouts default to PAGINATION_INDEX["AWS"] (boto3's configuration).
        where = dict(region_name=self.options.get("REGION") or None, endpoint=self.options.get("ENDPOINT_URL") or None,
                     connect_timeout=self.options.get("CONNECT_TIMEOUT"), read_timeout=self.options.get("READ_TIMEOUT"))
        self.client = aws.client("dynamodb", aws.PAGE, attempts=self.options.get("MAX_ATTEMPTS"), **where)
        # Writes retry in botocore's standard mode, not the adaptive mode of other background work: the
        # adaptive mode's rate limiter is the whole client's, so one hot group's throttles (a product's
        # stats item) would slow every other group's writes. AWS SDKs and Tools Reference Guide, "Retry
        # behavior": standard is "safe for use in multi-tenant applications", adaptive is "appropriate
        # only for specialized use-cases"; the AWS SDK for Java's RetryMode.ADAPTIVE: it "assumes that the
        # client is working against a single resource".
        self.writer = aws.client("dynamodb", aws.BACKGROUND, retry_mode="standard", **where)

    # --- table: made by `manage.py create_tables` only, never from the write path ------------------
    def create_table(self) -> None:
        """Create the index table if missing and wait until it is ACTIVE (a new table stays CREATING
        for a while on AWS, refusing reads and writes)."""
        try:
            self.writer.create_table(
                TableName=self.table,
                AttributeDefinitions=[{"AttributeName": "g", "AttributeType": "S"}, {"AttributeName": "p", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "g", "KeyType": "HASH"}, {"AttributeName": "p", "KeyType": "RANGE"}],
                BillingMode="PAY_PER_REQUEST",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceInUseException":
                raise
        self.writer.get_waiter("table_exists").wait(TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
        self._complete_registry()

    def _registry_complete(self) -> bool:
        return bool(self._call("get_item", self.writer, TableName=self.table, ConsistentRead=True,
                               Key=self._key(GROUPS, REGISTRY_COMPLETE)).get("Item"))

    def _complete_registry(self) -> None:
        """List in GROUPS the groups of a table made before the registry (one Scan, once); a new
        table's registry is complete from the start."""
        if self._registry_complete():
            return
        self._batch_write([{"PutRequest": {"Item": self._key(GROUPS, group)}} for group in self._scanned_groups()])
        self.writer.put_item(TableName=self.table, Item=self._key(GROUPS, REGISTRY_COMPLETE))

    def create_storage(self) -> str:
        self.create_table()
        return f"index table {self.table} (PAGINATION_INDEX_BACKEND=dynamodb)"

    def delete_table(self) -> None:
        try:
            self.writer.delete_table(TableName=self.table)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                raise

    def _call(self, method: str, client=None, **kwargs):
        """A read; a missing table reads as empty (the site before `create_tables`)."""
        try:
            return getattr(client or self.client, method)(**kwargs)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException":
                return {}
            raise

    def _transact(self, actions: list) -> None:
        """One TransactWriteItems. Raises LostRace (the caller re-reads and retries), InvalidIndexWrite,
        or botocore's error."""
        try:
            self.writer.transact_write_items(TransactItems=actions)
        except ClientError as exc:
            raise cancellation(exc) from exc

    def _query(self, group: str, low: str | None = None, high: str | None = None, client=None) -> list[dict]:
        """Every item of a small partition (with low <= p <= high), consistently: the MARKED and
        REPAIR lists. A group's own items are walked a page at a time (_walk), never listed."""
        return list(self._walk(group, low, high, client))

    def _walk(self, group: str, low: str | None = None, high: str | None = None, client=None, *,
              forward: bool = True, projection: str | None = None) -> Iterator[dict]:
        """The items of a partition (with low <= p <= high) in key order (or its reverse), read
        consistently WALK_PAGE items at a time: memory stays flat whatever the group's size. A
        missing table reads as empty."""
        kwargs = dict(TableName=self.table, KeyConditionExpression="g = :g",
                      ExpressionAttributeValues={":g": {"S": group}}, ConsistentRead=True, ScanIndexForward=forward)
        if low is not None:
            kwargs["KeyConditionExpression"] += " AND p BETWEEN :a AND :b"
            kwargs["ExpressionAttributeValues"].update({":a": {"S": low}, ":b": {"S": high}})
        if projection:
            kwargs["ProjectionExpression"] = projection
        while True:  # not botocore's paginator: it holds a page while it reads the next one
            try:
                response = (client or self.client).query(**kwargs, Limit=WALK_PAGE)
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                    raise
                return
            items, following = response.get("Items", []), response.get("LastEvaluatedKey")
            del response
            yield from items
            del items
            if not following:
                return
            kwargs["ExclusiveStartKey"] = following

    def _paged_items(self, operation: str, client, kwargs: dict) -> list[dict]:
        """Every page's items, through botocore's paginator (a missing table reads as empty)."""
        try:
            pages = (client or self.client).get_paginator(operation).paginate(**kwargs)
            return [item for page in pages for item in page.get("Items", [])]
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException":
                return []
            raise

    # --- items ----------------------------------------------------------------------------------
    @staticmethod
    def _page_entries(item: dict | None) -> list[Entry]:
        if not item:
            return []
        members = item.get("m", {}).get("L", [])
        keys = item.get("k", {}).get("L", [])
        return [(m["S"], k["S"]) for m, k in zip(members, keys)]

    def _page_item(self, group: str, generation: int, page: int, entries: Sequence[Entry]) -> dict:
        return {"g": {"S": group}, "p": {"S": page_key(generation, page)},
                "m": {"L": [{"S": member} for member, _ in entries]},
                "k": {"L": [{"S": key} for _, key in entries]}}

    def _member_item(self, group: str, generation: int, member: str, sort_key: str) -> dict:
        return {"g": {"S": group}, "p": {"S": member_key(generation, member)}, "k": {"S": sort_key}}

    @staticmethod
    def _key(group: str, p: str) -> dict:
        return {"g": {"S": group}, "p": {"S": p}}

    def _stats(self, group: str, client=None) -> Stats:
        item = self._call("get_item", client, TableName=self.table, Key=self._key(group, STATS),
                          ConsistentRead=True).get("Item")
        return Stats(item, self.page_size)

    def _batch_get(self, keys: list[dict], client=None, consistent: bool = True) -> list[dict]:
        """Items by key, 100 per BatchGetItem, unprocessed keys asked again with backoff (aws.retries)."""
        found = []
        for part in chunked(keys, 100):
            try:
                found += batch_get(client or self.client,
                                   {self.table: {"Keys": list(part), "ConsistentRead": consistent}})[self.table]
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                    raise
        return found

    def _get_pages(self, group: str, generation: int, pages: Iterable[int], client=None) -> dict[int, list[Entry]]:
        """Page items by number (BatchGetItem, consistent); a missing item reads as empty."""
        pages = sorted(set(pages))
        found = {page: [] for page in pages}
        for item in self._batch_get([self._key(group, page_key(generation, page)) for page in pages], client):
            found[int(item["p"]["S"].split(":")[1])] = self._page_entries(item)
        return found

    # --- the small path: one transaction per group (or several groups) --------------------------
    def _plan_group(self, group: str, removals: Sequence[Removal], adds: Sequence[Entry]) -> "Plan | None":
        """Read what the change needs (the stats item, the member items, the pages searched and
        shifted) and compute the writes; None when the group already is as asked (redelivery)."""
        plan = Plan(self, group, self._stats(group, self.writer), self.writer)
        members = {member for member, _ in removals} | {member for member, _ in adds}
        try:
            plan.load_members(members)
        except ClientError as exc:  # a member no key can hold (over DynamoDB's key sizes): never writable
            if exc.response["Error"]["Code"] == "ValidationException":
                raise InvalidIndexWrite(f"DynamoDB refused a member of group {group!r} as invalid: {exc}") from exc
            raise
        for member, sort_key in removals:
            current = plan.members.get(member)
            if current is not None and (sort_key is None or sort_key == current):
                plan.remove(member, current)
        for member, sort_key in adds:
            current = plan.members.get(member)
            if current == sort_key:
                continue
            if current is not None:
                plan.remove(member, current)
            plan.insert(member, sort_key)
        return plan if plan.changed else None

    def apply_net(self, adds: dict[str, list[Entry]], removes: dict[str, list[Removal]]) -> None:
        """Per group: plan the change (reads), then one transaction for as many groups' plans as fit
        in 100 items; a group whose change alone does not fit is applied in steps (_apply_in_steps)."""
        groups = sorted({*adds, *removes})
        for _ in optimistic("apply"):
            plans, lost = [], []
            for group in groups:
                group_adds = list(dict(adds.get(group, [])).items())  # the last of a repeated member
                group_removes = removes.get(group, [])
                if len(group_adds) + len(group_removes) > STEP_CHANGES:
                    self._apply_in_steps(group, group_removes, group_adds)
                    continue
                try:
                    plan = self._plan_group(group, group_removes, group_adds)
                except IndexError:  # a page item changed under the reads (another consumer): plan again
                    lost.append(group)
                    continue
                except PageFull:
                    self._apply_in_steps(group, group_removes, group_adds)
                    continue
                if plan is None:
                    continue
                if len(plan.actions()) > TRANSACTION_ITEMS:
                    self._apply_in_steps(group, group_removes, group_adds)
                    continue
                plans.append(plan)
            batch: list[Plan] = []
            for plan in plans + [None]:
                size = sum(len(p.actions()) for p in batch)
                if batch and (plan is None or size + len(plan.actions()) > TRANSACTION_ITEMS):
                    try:
                        self._transact([action for p in batch for action in p.actions()])
                    except LostRace:
                        lost += [p.group for p in batch]
                    batch = []
                if plan is not None:
                    batch.append(plan)
            if not lost:
                return
            groups = lost  # another consumer wrote these groups meanwhile: re-read and re-plan them

    def _apply_in_steps(self, group: str, removals: Sequence[Removal], adds: Sequence[Entry]) -> None:
        """A group's change in transactions of at most STEP_CHANGES changes each, in order (removals
        first, as in one plan); a step whose transaction would exceed 100 items is halved. Each step
        is idempotent, so a crash between steps is repaired by applying the batch again."""
        changes = [(True, removal) for removal in removals] + [(False, entry) for entry in adds]
        steps = deque(changes[i:i + STEP_CHANGES] for i in range(0, len(changes), STEP_CHANGES))
        while steps:
            step = steps.popleft()
            step_removals = [change for is_removal, change in step if is_removal]
            step_adds = [change for is_removal, change in step if not is_removal]
            remarked = False
            for _ in optimistic(group):
                try:
                    plan = self._plan_group(group, step_removals, step_adds)
                    if plan is None:
                        break
                    if len(plan.actions()) > TRANSACTION_ITEMS and len(step) > 1:
                        steps.extendleft([step[len(step) // 2:], step[:len(step) // 2]])
                        break
                    self._transact(plan.actions())
                    break
                except (IndexError, LostRace):  # another consumer wrote the group: re-read and re-plan
                    continue
                except PageFull as exc:
                    # Inserts keep landing in marked pages: carry what the pages grew by on towards
                    # the newest end first (the re-mark sync_index runs between polls), then plan
                    # again; a step that still does not fit is halved. A single change that does not
                    # fit an unmarked group is a design limit, not an outage.
                    if not remarked:
                        self._remark_group(group)
                        remarked = True
                        continue
                    if len(step) > 1:
                        steps.extendleft([step[len(step) // 2:], step[:len(step) // 2]])
                        break
                    raise InvalidIndexWrite(f"{exc}, even after the group's re-mark") from exc

    # --- the big path: a new generation, a page at a time -------------------------------------
    def _generation_entries(self, group: str, stats: Stats) -> Iterator[Entry]:
        """Every entry of the group's current generation, newest first, walked a page item at a time
        (whatever the page deltas)."""
        for item in self._walk(group, page_key(stats.generation, 0), page_key(stats.generation, 10**10 - 1),
                               self.writer, forward=False):
            yield from reversed(self._page_entries(item))

    def replace(self, group: str, entries: Iterable[Entry]) -> None:
        """Spool the entries (read once) to a temporary file, then write them as a fresh generation
        a page at a time (_swap_in). Nothing is written when they are the group as it is."""
        with Spool() as spool:
            stats = self._stats(group, self.writer)
            same = spool.fill(entries, compare=None if stats.marked else self._generation_entries(group, stats))
            if same and self._stats(group, self.writer).version == stats.version:
                return
            spool.sort_if_needed()
            for attempt in optimistic(f"rewrite {group}"):
                if attempt:
                    stats = self._stats(group, self.writer)
                if self._swap_in(group, spool, stats):
                    return

    def repair_group(self, group: str) -> None:
        """Write the group's own entries anew, exact and unmarked (a fresh generation)."""
        for _ in optimistic(f"rewrite {group}"):
            stats = self._stats(group, self.writer)
            with Spool() as spool:
                spool.fill(self._generation_entries(group, stats))  # out of order if damaged: sorted then
                spool.sort_if_needed()
                if self._swap_in(group, spool, stats):
                    return

    def _swap_in(self, group: str, spool: "Spool", stats: Stats) -> bool:
        """Write the spooled entries (newest first, no member twice) as a fresh generation with plain
        batch writes (nothing reads that generation yet): page items from the newest (which holds
        what is left over a multiple of PAGE_SIZE) down to page 0, and member items; then flip the
        stats item to it in one transaction conditioned on the version read, and delete the older
        generations. False (the fresh generation dropped) when another writer got there first."""
        fresh = secrets.randbelow(GENERATION_LIMIT - 1) + 1
        size, count = self.page_size, spool.count
        pages = (count + size - 1) // size
        requests: list[dict] = []
        page, entries = pages - 1, []
        for member, sort_key in spool:
            entries.append((member, sort_key))
            requests.append({"PutRequest": {"Item": self._member_item(group, fresh, member, sort_key)}})
            if len(entries) == count - page * size:  # this page item is whole (the newest one may be short)
                requests.append({"PutRequest": {"Item": self._page_item(group, fresh, page, entries[::-1])}})
                count, page, entries = page * size, page - 1, []
            if len(requests) >= WRITE_CHUNK:
                self._batch_write(requests)
                requests = []
        self._batch_write(requests)
        if not spool.unique and self._member_count(group, fresh) != spool.count:
            # a member given twice: the page items hold it twice, its member item once. Sort in memory.
            self._drop_generations(group, lambda generation: generation == fresh)
            spool.sort_if_needed(force=True)
            return self._swap_in(group, spool, stats)
        if stats.version:
            condition = {"ConditionExpression": "v = :v", "ExpressionAttributeValues": {":v": {"N": str(stats.version)}}}
        else:
            condition = {"ConditionExpression": "attribute_not_exists(v)"}
        target = Stats(None, size)
        target.count, target.version, target.generation, target.pages = spool.count, stats.version, fresh, pages
        actions = [{"Delete": {"TableName": self.table, "Key": self._key(MARKED, group)}},
                   {"Delete": {"TableName": self.table, "Key": self._key(REPAIR, group)}}]
        if spool.count:
            actions.append({"Put": {"TableName": self.table, "Item": target.item(group), **condition}})
            actions.append({"Put": {"TableName": self.table, "Item": self._key(GROUPS, group)}})
        else:
            actions.append({"Delete": {"TableName": self.table, "Key": self._key(group, STATS), **condition}})
            actions.append({"Delete": {"TableName": self.table, "Key": self._key(GROUPS, group)}})
        try:
            self._transact(actions)
        except LostRace:
            self._drop_generations(group, lambda generation: generation == fresh)
            return False
        self._drop_generations(group, lambda generation: generation != fresh or not spool.count)
        return True

    def _member_count(self, group: str, generation: int) -> int:
        """How many member items a generation holds (Select=COUNT: keys only come back)."""
        pages = self.writer.get_paginator("query").paginate(
            TableName=self.table, KeyConditionExpression="g = :g AND begins_with(p, :m)", Select="COUNT",
            ExpressionAttributeValues={":g": {"S": group}, ":m": {"S": member_key(generation, "")}}, ConsistentRead=True)
        return sum(page["Count"] for page in pages)

    def _drop_generations(self, group: str, doomed_generation: Callable[[int], bool]) -> None:
        """Delete a group's page and member items of the generations `doomed_generation` picks, as
        they are walked (only their keys are read)."""
        doomed = []
        for item in self._walk(group, "m", "q", self.writer, projection="p"):
            if doomed_generation(int(item["p"]["S"][1:11])):
                doomed.append({"DeleteRequest": {"Key": self._key(group, item["p"]["S"])}})
                if len(doomed) >= WRITE_CHUNK:
                    self._batch_write(doomed)
                    doomed = []
        self._batch_write(doomed)

    def _batch_write(self, requests: list[dict]) -> None:
        for part in chunked(requests, 25):
            # One BatchWriteItem refuses a key twice; the last request of a key wins, as across requests.
            unique = {}
            for request in part:
                item = request["PutRequest"]["Item"] if "PutRequest" in request else request["DeleteRequest"]["Key"]
                unique[item["g"]["S"], item["p"]["S"]] = request
            batch_write(self.writer, {self.table: list(unique.values())})

    # --- the background re-mark ------------------------------------------------------------------
    def marked_groups(self) -> list[str]:
        return [item["p"]["S"] for item in self._query(MARKED, client=self.writer)]

    def repair_groups(self) -> list[str]:
        """The groups listed for a rewrite that a re-mark could not do (REPAIR)."""
        return [item["p"]["S"] for item in self._query(REPAIR, client=self.writer)]

    def remark_step(self, group: str, rewrites: bool = True) -> bool:
        """Shift the entries of up to MAX_SHIFT + 1 page items, from the first marked one, back into
        exact pages: one transaction. True when nothing more is to be done to the group now: it is
        left unmarked, or it needs a rewrite, which it does only with `rewrites` (else it lists the
        group for repair: REPAIR). (The last step, which reaches the newest page item, may write up to
        90 page items: what a marked page had grown by is spread over new ones. A step carries what
        its pages grew by on to the pages after its exact ones, spread so that no page item passes
        PAGE_ITEM_BYTES: see spread().)"""
        for _ in optimistic(f"re-mark {group}", give_up=False):
            stats = self._stats(group, self.writer)
            if not stats.marked:
                self._transact([{"Delete": {"TableName": self.table, "Key": self._key(MARKED, group)}}])
                return True
            plan = Plan(self, group, stats, self.writer)
            first = min(stats.deltas)
            last = min(first + self.max_shift, stats.pages - 1)
            pages = self._get_pages(group, stats.generation, range(first, last + 1), self.writer)
            entries = [entry for page in range(first, last + 1) for entry in pages[page]]
            size = self.page_size
            new = plan.stats
            newest = last == stats.pages - 1
            # To the newest end: exact pages, new ones as needed (up to REMARK_ITEMS), the emptied
            # ones deleted. Short of it: the first pages exact, the rest spread over the others.
            span = max(last + 1 - first, min(-(-len(entries) // size), REMARK_ITEMS)) if newest else last + 1 - first
            full, layout = spread(entries, size, span, len(entries) // size if newest else self.max_shift)
            if not full and not (newest and len(entries) <= size):
                # fewer than P entries over MAX_SHIFT + 1 pages, or more than the pages can hold: only a
                # rewrite helps, and its time and memory grow with the group
                if rewrites:
                    self.repair_group(group)
                else:
                    self._list_for_repair(group)
                return True
            if not full:  # the newest end holds less than a page
                layout = [entries] + [[] for _ in range(span - 1)]
            for page, held in zip(range(first, first + span), layout):
                plan.put_page(page, held if held or not newest else None)
                new.deltas.pop(page, None)
                if len(held) != size:
                    new.deltas[page] = len(held) - size
            if newest:
                new.pages = first + sum(1 for held in layout if held)
                for page in [page for page in new.deltas if page >= new.pages - 1]:
                    del new.deltas[page]  # the newest page's size is implied by the count
            plan.changed = True
            try:
                self._transact(plan.actions())
            except LostRace:
                continue
            return not new.marked
        return False  # lost every race: the next maintain() goes on

    def _remark_group(self, group: str) -> None:
        """Re-mark steps on one group until it is unmarked (each a bounded transaction)."""
        for _ in range(4 * (self._stats(group, self.writer).pages // self.max_shift) + 10):
            if self.remark_step(group, rewrites=False):  # never a rewrite inside a write
                return

    def _list_for_repair(self, group: str) -> None:
        self.writer.put_item(TableName=self.table, Item=self._key(REPAIR, group))
        logger.warning("index group %r needs a rewrite that a re-mark here may not run (its time and "
                       "memory grow with the group): listed for repair, which sync_index's maintain(), "
                       "`verify_index --repair` or `rebuild_index` does", group)

    def remark(self, budget: int = 50, rewrites: bool = True) -> int:
        """Background work: up to `budget` re-mark steps over the marked groups, then (with
        `rewrites`) one rewrite of a group listed for repair; returns the steps taken (sync_index
        calls this between polls). Without `rewrites`, a group that needs one is listed for repair
        and left alone: every step here is then one transaction of at most 100 items."""
        steps = 0
        listed = set(self.repair_groups())
        for group in self.marked_groups():
            if group in listed and not rewrites:
                continue
            while steps < budget:
                steps += 1
                if self.remark_step(group, rewrites=rewrites):
                    break
        if rewrites and steps < budget:
            for group in self.repair_groups()[:1]:  # one a call: a rewrite's time grows with the group
                self.repair_group(group)
                steps += 1
        return steps

    def maintain(self, *, rewrites: bool = True) -> int:
        return self.remark(rewrites=rewrites)

    def check_integrity(self, group: str) -> list[str]:
        """Each page item against the stats geometry and its neighbours, and the member items against
        the page items' entries. Both are walked a page of items at a time (memory flat in the group's
        size) and compared by count and by an order-free digest of their entries; only when those
        differ are the member items of each page item's entries read by key, to say which."""
        stats = self._stats(group)
        problems = []
        numbers, consecutive, following, previous, digest, held = [], True, 0, None, 0, 0
        for item in self._walk(group, page_key(stats.generation, 0), page_key(stats.generation, 10**10 - 1)):
            page = int(item["p"]["S"].split(":")[1])
            entries = self._page_entries(item)
            if len(numbers) < 10:
                numbers.append(page)
            consecutive, following = consecutive and page == following, page + 1
            if len(entries) != stats.length(page):
                problems.append(f"page item {page} holds {len(entries)} entries, the stats item says {stats.length(page)}")
            if any(not older(a, b) for a, b in zip(entries, entries[1:])):
                problems.append(f"page item {page}: entries out of order")
            if entries and previous and not older(previous, entries[0]):
                problems.append(f"page item {page} starts before the end of the page item before it")
            previous = entries[-1] if entries else previous
            held += len(entries)
            digest = (digest + sum(entry_digest(entry) for entry in entries)) % DIGEST_MODULUS
        if stats.exists and not (consecutive and following == stats.pages):
            problems.append(f"page items {numbers}... but the stats item says {stats.pages}")
        members, member_digest = 0, 0
        for item in self._walk(group, member_key(stats.generation, ""), member_key(stats.generation, "\U0010ffff"),
                               projection="p, k"):
            members += 1
            member_digest = (member_digest + entry_digest((item["p"]["S"].split(":", 1)[1], item["k"]["S"]))) % DIGEST_MODULUS
        if members != held or member_digest != digest:
            problems += self._member_mismatches(group, stats, members - held)
        if members != stats.count:
            problems.append(f"{members} member items for a count of {stats.count}")
        if stats.marked and group not in self.marked_groups():
            problems.append("marked (page deltas) but not listed for the re-mark")
        if stats.exists and self._registry_complete() and not self._call("get_item", TableName=self.table, ConsistentRead=True,
                                           Key=self._key(GROUPS, group)).get("Item"):
            problems.append("not in the group registry (groups() would miss it): verify_index --repair lists it")
        if group in self.repair_groups():
            problems.append("listed for repair: its page items need a rewrite (verify_index --repair, rebuild_index)")
        return problems

    def _member_mismatches(self, group: str, stats: Stats, surplus: int, limit: int = 10) -> list[str]:
        """Which page items' entries disagree with their member items (the first `limit`), reading
        the member items by key a hundred entries at a time."""
        problems, found = [], 0
        walked = self._walk(group, page_key(stats.generation, 0), page_key(stats.generation, 10**10 - 1))
        for items in batched(walked, max(1, 100 // self.page_size)):
            located = [(int(item["p"]["S"].split(":")[1]), entry) for item in items for entry in self._page_entries(item)]
            keys = {self._key(group, member_key(stats.generation, member))["p"]["S"] for _, (member, _) in located}
            got = {item["p"]["S"].split(":", 1)[1]: item["k"]["S"]
                   for item in self._batch_get([self._key(group, p) for p in sorted(keys)])}
            for page, (member, sort_key) in located:
                if got.get(member) != sort_key:
                    found += 1
                    if found <= limit:
                        problems.append(f"page item {page}: {member}'s member item says {got.get(member)!r}, not {sort_key!r}")
        if found > limit:
            problems.append(f"... and {found - limit} more entries whose member item disagrees")
        if not found and surplus > 0:
            problems.append(f"{surplus} member items hold entries no page item holds")
        elif not found:
            problems.append("the member items hold other entries than the page items")
        return problems

    def check_order(self, group: str, expected: Sequence[Entry]) -> list[str]:
        """Every page item against the true order (expected: newest first): which page items hold
        entries other than the table's at their positions."""
        for _ in optimistic(f"read {group}"):
            stats = self._stats(group)
            truth = list(expected)[::-1]
            pages = self._get_pages(group, stats.generation, range(stats.pages))
            if self._stats(group).version != stats.version:
                continue
            problems = []
            for page in range(stats.pages):
                start = stats.start(page)
                want = truth[start:start + stats.length(page)]
                got = pages[page]
                if got != want:
                    wrong = sum(1 for a, b in zip(got, want) if a != b) + abs(len(got) - len(want))
                    problems.append(f"page item {page} (positions {start}-{start + len(got) - 1} from the oldest, "
                                    f"ranks {stats.count - start - len(got)}-{stats.count - 1 - start} newest first): "
                                    f"{wrong} of {len(got)} entries differ from the table's order")
            if len(problems) > 5:  # the first drifting page items say where it starts; then how many
                problems[5:] = [f"... and {len(problems) - 5} more page items differ from the table's order"]
            if stats.count != len(truth):
                problems.append(f"the page items hold {stats.count} entries, the table has {len(truth)}")
            return problems

    # --- reads ----------------------------------------------------------------------------------
    def count(self, group: str) -> int:
        return self._stats(group).count

    def count_many(self, groups: Iterable[str]) -> dict[str, int]:
        """The stats items by BatchGetItem, eventually consistent (half a read unit per 4 KB, and no
        cancellation by a write in flight, as TransactGetItems has): counts a page shows beside
        others may be a moment old."""
        groups = list(groups)
        found = self._batch_get([self._key(group, STATS) for group in groups], consistent=False)
        counts = {item["g"]["S"]: Stats(item, self.page_size).count for item in found}
        return {group: counts.get(group, 0) for group in groups}

    def at(self, group: str, rank: int) -> Entry | None:
        entries = self.range(group, rank, rank + 1) if rank >= 0 else []
        return entries[0] if entries else None

    def range(self, group: str, start: int, stop: int) -> list[Entry]:
        """The stats item, one BatchGetItem of the page items holding the ranks (page numbers from
        the stats item's geometry, marked or not), the stats item again: a write in between retries."""
        start = max(start, 0)
        if start >= stop:
            return []
        for _ in optimistic(f"read {group}"):
            stats = self._stats(group)
            low, high = max(stats.count - stop, 0), stats.count - 1 - start  # positions from the oldest
            if high < low:
                return []
            numbers = range(stats.locate(low), stats.locate(high) + 1)
            pages = self._get_pages(group, stats.generation, numbers)
            if self._stats(group).version != stats.version:
                continue
            oldest_first = [entry for page in numbers for entry in pages[page]]
            first = stats.start(numbers[0])
            return oldest_first[low - first:high - first + 1][::-1]

    def count_newer(self, group: str, sort_key: str, member: str | None = None) -> int:
        """Binary search over the positions, one page item read per step (cached), then the stats
        item again (a write in between retries)."""
        for _ in optimistic(f"read {group}"):
            view = Plan(self, group, self._stats(group))
            count = view.stats.count
            low, high = 0, count  # the first position (from the oldest) whose entry is newer
            try:
                while low < high:
                    middle = (low + high) // 2
                    if is_newer(view.entry_at(middle), sort_key, member):
                        high = middle
                    else:
                        low = middle + 1
            except IndexError:  # a page item changed under the reads: read again
                continue
            if not count or self._stats(group).version == view.stats.version:
                return count - low

    def groups(self) -> list[str]:
        """The registry's Query (GROUPS); a Scan of every stats item while the registry is not complete
        (a table made before it, until `create_tables`)."""
        if not self._registry_complete():
            return self._scanned_groups()
        return [item["p"]["S"] for item in self._walk(GROUPS, client=self.writer) if item["p"]["S"] != REGISTRY_COMPLETE]

    def is_empty(self) -> bool:
        if not self._registry_complete():
            return not self._scanned_groups()
        response = self._call("query", self.writer, TableName=self.table, KeyConditionExpression="g = :g AND p > :c",
                              ExpressionAttributeValues={":g": {"S": GROUPS}, ":c": {"S": REGISTRY_COMPLETE}}, Limit=1)
        return not response.get("Items")

    def _scanned_groups(self) -> list[str]:
        items = self._paged_items("scan", self.writer, dict(
            TableName=self.table, FilterExpression="p = :s AND attribute_exists(c)",
            ExpressionAttributeValues={":s": {"S": STATS}}, ConsistentRead=True))
        return sorted(item["g"]["S"] for item in items)

    def clear(self) -> None:
        for group in self.groups():
            self.replace(group, [])

    def close(self) -> None:
        self.client.close()
        self.writer.close()


class Spool:
    """A group's entries in a temporary file, in the order given, so that a rewrite holds one page
    item at a time whatever the group's size (a rebuild's stream is read once, and a retried flip
    writes the same entries again). Entries that are not strictly newest first (any order is allowed
    by replace()), or a member given twice, are sorted in memory: rebuilds and repairs never do that."""

    HEADER = struct.Struct("<II")

    def __init__(self):
        self.file = tempfile.TemporaryFile()
        self.count = 0
        self.ordered = True  # strictly newest first, so far
        self.unique = False  # known to hold no member twice (sorted in memory)

    def __enter__(self) -> "Spool":
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()

    def fill(self, entries: Iterable[Entry], compare: Iterator[Entry] | None = None) -> bool:
        """Spool `entries`; True when they are, in order, exactly what `compare` yields."""
        same, last, write = compare is not None, None, self.file.write
        for member, sort_key in entries:
            entry = (member, sort_key)
            if last is not None and not older(entry, last):
                self.ordered = False
            if same and next(compare, None) != entry:
                same = False
            member_bytes, key_bytes = member.encode(), sort_key.encode()
            write(self.HEADER.pack(len(member_bytes), len(key_bytes)))
            write(member_bytes)
            write(key_bytes)
            self.count += 1
            last = entry
        return same and self.ordered and next(compare, None) is None

    def __iter__(self) -> Iterator[Entry]:
        self.file.seek(0)
        read, header = self.file.read, self.HEADER
        for _ in range(self.count):
            member_length, key_length = header.unpack(read(header.size))
            yield read(member_length).decode(), read(key_length).decode()

    def sort_if_needed(self, force: bool = False) -> None:
        """Entries out of order (or, with force, holding a member twice): newest first in memory,
        a repeated member keeping its last sort key."""
        if self.ordered and not force:
            return
        entries = newest_first(dict(self).items())
        self.file.seek(0)
        self.file.truncate()
        self.count, self.ordered, self.unique = 0, True, True
        self.fill(entries)


class Plan:
    """One group's change in memory: the stats item read, the page items read or rewritten (by
    number), the member items read or changed. Reads are consistent; the writes go in one
    transaction conditioned on the stats version read."""

    def __init__(self, index: DynamoDBIndex, group: str, stats: Stats, client=None):
        self.index = index
        self.client = client or index.client  # the writer's when planning a write, else the reader's
        self.group = group
        self.read = stats
        self.stats = stats.copy()
        self.pages: dict[int, list[Entry] | None] = {}  # None: delete the page item
        self.written: set[int] = set()
        self.members: dict[str, str | None] = {}
        self.members_written: set[str] = set()
        self.changed = False

    # reads
    def load_members(self, members: Iterable[str]) -> None:
        keys = [self.index._key(self.group, member_key(self.read.generation, member)) for member in sorted(members)]
        for member in members:
            self.members.setdefault(member, None)
        if not self.read.exists:
            return
        for item in self.index._batch_get(keys, self.client):
            self.members[item["p"]["S"].split(":", 1)[1]] = item["k"]["S"]

    def page(self, number: int) -> list[Entry]:
        if number not in self.pages:
            item = self.index._call("get_item", self.client, TableName=self.index.table, ConsistentRead=True,
                                    Key=self.index._key(self.group, page_key(self.read.generation, number))).get("Item")
            self.pages[number] = self.index._page_entries(item)
        return self.pages[number] or []

    def entry_at(self, position: int) -> Entry:
        page = self.stats.locate(position)
        return self.page(page)[position - self.stats.start(page)]

    def position(self, entry: Entry) -> int:
        """How many entries are older than `entry` (where it is or would be inserted)."""
        count = self.stats.count
        if not count or older(self.entry_at(count - 1), entry):
            return count  # an append: the newest page item only
        low, high = 0, count - 1
        while low < high:
            middle = (low + high) // 2
            if older(self.entry_at(middle), entry):
                low = middle + 1
            else:
                high = middle
        return low

    # writes
    def put_page(self, number: int, entries: list[Entry] | None) -> None:
        self.pages[number] = entries
        self.written.add(number)

    def insert(self, member: str, sort_key: str) -> None:
        entry = (member, sort_key)
        stats, size = self.stats, self.index.page_size
        position = self.position(entry)
        self.members[member] = sort_key
        self.members_written.add(member)
        self.changed = True
        if position == stats.count:  # append
            last = stats.pages - 1
            if stats.pages and len(self.page(last)) < size:
                self.put_page(last, self.page(last) + [entry])
            else:
                if stats.pages and len(self.page(last)) != size:
                    stats.deltas[last] = len(self.page(last)) - size
                self.put_page(stats.pages, [entry])
                stats.pages += 1
            stats.count += 1
            return
        page = stats.locate(position)
        offset = position - stats.start(page)
        entries = list(self.page(page))
        entries.insert(offset, entry)
        stats.count += 1
        if page == stats.pages - 1 or stats.pages - page <= self.index.max_shift:
            # shift: each page from `page` on keeps its size, its newest entry rolling into the next
            for number in range(page, stats.pages - 1):
                self.put_page(number, entries[:-1])
                entries = [entries[-1]] + list(self.page(number + 1))
            last = stats.pages - 1
            if len(entries) > size:  # the newest page item overflows into a new one
                self.put_page(last, entries[:size])
                self.put_page(stats.pages, entries[size:])
                stats.pages += 1
            else:
                self.put_page(last, entries)
        else:  # mark: page `page` grows by one, the pages after it keep their entries
            if entries_bytes(entries) > PAGE_ITEM_BYTES:
                raise PageFull(f"{self.group}: page item {page} would pass {PAGE_ITEM_BYTES} bytes")
            self.put_page(page, entries)
            self._mark(page, +1)

    def remove(self, member: str, sort_key: str) -> None:
        entry = (member, sort_key)
        stats = self.stats
        position = self.position(entry)
        if position >= stats.count or self.entry_at(position) != entry:
            # the member item says so but the pages do not hold it: keep the pages, drop the item
            self.members[member] = None
            self.members_written.add(member)
            self.changed = True
            return
        page = stats.locate(position)
        entries = list(self.page(page))
        del entries[position - stats.start(page)]
        self.members[member] = None
        self.members_written.add(member)
        self.changed = True
        stats.count -= 1
        if page == stats.pages - 1 or stats.pages - page <= self.index.max_shift:
            # shift: each later page's oldest entry moves back into the page before it
            for number in range(page, stats.pages - 1):
                following = list(self.page(number + 1))
                if not following:  # an emptied marked page: nothing to pull, this page's delta absorbs it
                    self.put_page(number, entries)
                    self._mark(number, -1)
                    break
                entries.append(following.pop(0))
                self.put_page(number, entries)
                entries = following
            else:
                self.put_page(stats.pages - 1, entries)
        else:
            self.put_page(page, entries)
            self._mark(page, -1)
        while stats.pages and stats.length(stats.pages - 1) <= 0:  # the newest page item emptied
            stats.pages -= 1
            stats.deltas.pop(stats.pages, None)
            self.put_page(stats.pages, None)
        stats.deltas.pop(stats.pages - 1, None)  # the newest page's size is implied by the count

    def _mark(self, page: int, delta: int) -> None:
        if page not in self.stats.deltas and len(self.stats.deltas) >= MARKED_PAGES:
            raise PageFull(f"{self.group}: {MARKED_PAGES} page items marked already")
        value = self.stats.deltas.get(page, 0) + delta
        if value:
            self.stats.deltas[page] = value
        else:
            self.stats.deltas.pop(page, None)

    def actions(self) -> list[dict]:
        table, group, index = self.index.table, self.group, self.index
        generation = self.read.generation
        actions = []
        for number in sorted(self.written):
            entries = self.pages[number]
            if entries is None:
                actions.append({"Delete": {"TableName": table, "Key": index._key(group, page_key(generation, number))}})
            else:
                actions.append({"Put": {"TableName": table, "Item": index._page_item(group, generation, number, entries)}})
        for member in sorted(self.members_written):
            sort_key = self.members[member]
            if sort_key is None:
                actions.append({"Delete": {"TableName": table, "Key": index._key(group, member_key(generation, member))}})
            else:
                actions.append({"Put": {"TableName": table, "Item": index._member_item(group, generation, member, sort_key)}})
        if self.read.version:
            condition = {"ConditionExpression": "v = :v", "ExpressionAttributeValues": {":v": {"N": str(self.read.version)}}}
        else:
            condition = {"ConditionExpression": "attribute_not_exists(v)"}
        if self.stats.count:
            actions.append({"Put": {"TableName": table, "Item": self.stats.item(group), **condition}})
        else:
            actions.append({"Delete": {"TableName": table, "Key": index._key(group, STATS), **condition}})
        if bool(self.stats.count) != self.read.exists:  # the group is made or emptied: the registry says so
            if self.stats.count:
                actions.append({"Put": {"TableName": table, "Item": index._key(GROUPS, group)}})
            else:
                actions.append({"Delete": {"TableName": table, "Key": index._key(GROUPS, group)}})
        if self.stats.marked != self.read.marked:
            marker = index._key(MARKED, group)
            if self.stats.marked:
                actions.append({"Put": {"TableName": table, "Item": marker}})
            else:
                actions.append({"Delete": {"TableName": table, "Key": marker}})
        return actions
