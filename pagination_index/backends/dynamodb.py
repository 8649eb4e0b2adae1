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

import logging
import secrets
from collections import deque
from typing import Callable, Iterable, Sequence

from botocore.exceptions import BotoCoreError, ClientError

from pagination_index import aws
from pagination_index.aws.retries import RACE, batch_get, batch_write

from .base import Entry, NetWriteIndex, Removal, chunked, is_newer, newest_first

logger = logging.getLogger(__name__)

STATS = "s"
MARKED = "\x00marked"  # the partition listing marked groups (p = the group): what remark() has to do
ATTEMPTS = 20  # of a write that loses races to another consumer (with a jittered backoff between)
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


class KeptConflicting(Exception):
    """Still losing races after ATTEMPTS tries (the funnel reports it as IndexUnavailable)."""


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
    for full in range(min(most, span - 1 if span > 1 else 1), 0, -1):
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
    MAX_ATTEMPTS (pages), writes (sync_index, rebuild) retry patiently in botocore's adaptive mode."""

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
        self.writer = aws.client("dynamodb", aws.BACKGROUND, **where)

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
        """Every item of a group's partition (with low <= p <= high), consistently."""
        kwargs = dict(TableName=self.table, KeyConditionExpression="g = :g",
                      ExpressionAttributeValues={":g": {"S": group}}, ConsistentRead=True)
        if low is not None:
            kwargs["KeyConditionExpression"] += " AND p BETWEEN :a AND :b"
            kwargs["ExpressionAttributeValues"].update({":a": {"S": low}, ":b": {"S": high}})
        return self._paged_items("query", client, kwargs)

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
        for attempt in range(ATTEMPTS):
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
            RACE.sleep(attempt)
        raise KeptConflicting(f"still conflicting after {ATTEMPTS} attempts")

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
            for attempt in range(ATTEMPTS):
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
                    RACE.sleep(attempt)
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
            else:
                raise KeptConflicting(f"{group}: still conflicting after {ATTEMPTS} attempts")

    # --- the big path: a new generation --------------------------------------------------------
    def _entries(self, group: str, stats: Stats) -> list[Entry]:
        """Every entry of a group, oldest first (the page items in order, whatever their deltas)."""
        items = self._query(group, page_key(stats.generation, 0), page_key(stats.generation, 10**10 - 1), self.writer)
        items.sort(key=lambda item: item["p"]["S"])
        return [entry for item in items for entry in self._page_entries(item)]

    def _rewrite(self, group: str, change: Callable[[list[Entry]], list[Entry]], force: bool = False) -> None:
        """Write the group anew: its pages (exact, unmarked) and member items in a fresh generation
        (plain batch writes: nothing reads that generation yet), then flip the stats item to it in
        one transaction conditioned on the version, then delete every item of older generations."""
        for attempt in range(ATTEMPTS):
            stats = self._stats(group, self.writer)
            old = self._entries(group, stats)
            new = newest_first(dict(change(old)).items())[::-1]
            if new == old and not stats.marked and not force:
                return
            fresh = secrets.randbelow(GENERATION_LIMIT - 1) + 1
            size = self.page_size
            items = [self._page_item(group, fresh, page, new[page * size:page * size + size])
                     for page in range((len(new) + size - 1) // size)]
            items += [self._member_item(group, fresh, member, sort_key) for member, sort_key in new]
            self._batch_write([{"PutRequest": {"Item": item}} for item in items])
            if stats.version:
                condition = {"ConditionExpression": "v = :v", "ExpressionAttributeValues": {":v": {"N": str(stats.version)}}}
            else:
                condition = {"ConditionExpression": "attribute_not_exists(v)"}
            target = Stats(None, size)
            target.count, target.version, target.generation = len(new), stats.version, fresh
            target.pages = len(items) - len(new)
            actions = [{"Delete": {"TableName": self.table, "Key": self._key(MARKED, group)}}]
            if new:
                actions.append({"Put": {"TableName": self.table, "Item": target.item(group), **condition}})
            else:
                actions.append({"Delete": {"TableName": self.table, "Key": self._key(group, STATS), **condition}})
            try:
                self._transact(actions)
            except LostRace:
                self._drop_generations(group, lambda generation: generation == fresh)
                RACE.sleep(attempt)
                continue
            self._drop_generations(group, lambda generation: generation != fresh or not new)
            return
        raise KeptConflicting(f"rewrite {group}: still conflicting after {ATTEMPTS} attempts")

    def _drop_generations(self, group: str, doomed_generation: Callable[[int], bool]) -> None:
        """Delete a group's page and member items of the generations `doomed_generation` picks."""
        doomed = []
        for item in self._query(group, "m", "q", self.writer):
            if doomed_generation(int(item["p"]["S"][1:11])):
                doomed.append({"DeleteRequest": {"Key": self._key(group, item["p"]["S"])}})
        self._batch_write(doomed)

    def _batch_write(self, requests: list[dict]) -> None:
        for part in chunked(requests, 25):
            batch_write(self.writer, {self.table: list(part)})

    def replace(self, group: str, entries: Sequence[Entry]) -> None:
        self._rewrite(group, lambda old: list(entries))

    # --- the background re-mark ------------------------------------------------------------------
    def marked_groups(self) -> list[str]:
        return [item["p"]["S"] for item in self._query(MARKED, client=self.writer)]

    def remark_step(self, group: str) -> bool:
        """Shift the entries of up to MAX_SHIFT + 1 page items, from the first marked one, back into
        exact pages: one transaction. True when the group is left unmarked. (The last step, which
        reaches the newest page item, may write up to 90 page items: what a marked page had grown
        by is spread over new ones. A step carries what its pages grew by on to the pages after its
        exact ones, spread so that no page item passes PAGE_ITEM_BYTES: see spread().)"""
        for attempt in range(ATTEMPTS):
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
                # fewer than P entries over MAX_SHIFT + 1 pages, or more than the pages can hold: rewrite the group
                self._rewrite(group, lambda old: old)
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
                RACE.sleep(attempt)
                continue
            return not new.marked
        return False

    def _remark_group(self, group: str) -> None:
        """Re-mark steps on one group until it is unmarked (each a bounded transaction)."""
        for _ in range(4 * (self._stats(group, self.writer).pages // self.max_shift) + 10):
            if self.remark_step(group):
                return

    def remark(self, budget: int = 50) -> int:
        """Background work: up to `budget` re-mark steps over the marked groups; returns the steps
        taken (sync_index calls this between polls)."""
        steps = 0
        for group in self.marked_groups():
            while steps < budget:
                steps += 1
                if self.remark_step(group):
                    break
        return steps

    def maintain(self) -> int:
        return self.remark()

    def repair_group(self, group: str) -> None:
        self._rewrite(group, lambda old: old, force=True)

    def check_integrity(self, group: str) -> list[str]:
        """Each page item against the stats geometry and its neighbours, and each entry's member item."""
        stats = self._stats(group)
        problems = []
        items = self._query(group)
        pages = {int(i["p"]["S"].split(":")[1]): self._page_entries(i) for i in items
                 if i["p"]["S"].startswith(page_key(stats.generation, 0)[:12])}
        members = {i["p"]["S"].split(":", 1)[1]: i["k"]["S"] for i in items
                   if i["p"]["S"].startswith(member_key(stats.generation, "")[:12])}
        if stats.exists and sorted(pages) != list(range(stats.pages)):
            problems.append(f"page items {sorted(pages)[:10]}... but the stats item says {stats.pages}")
        previous = None
        for page in sorted(pages):
            entries = pages[page]
            if len(entries) != stats.length(page):
                problems.append(f"page item {page} holds {len(entries)} entries, the stats item says {stats.length(page)}")
            if any(not older(a, b) for a, b in zip(entries, entries[1:])):
                problems.append(f"page item {page}: entries out of order")
            if entries and previous and not older(previous, entries[0]):
                problems.append(f"page item {page} starts before the end of the page item before it")
            previous = entries[-1] if entries else previous
            for member, sort_key in entries:
                if members.get(member) != sort_key:
                    problems.append(f"page item {page}: {member}'s member item says {members.get(member)!r}, not {sort_key!r}")
        if len(members) != stats.count:
            problems.append(f"{len(members)} member items for a count of {stats.count}")
        if stats.marked and group not in self.marked_groups():
            problems.append("marked (page deltas) but not listed for the re-mark")
        return problems

    def check_order(self, group: str, expected: Sequence[Entry]) -> list[str]:
        """Every page item against the true order (expected: newest first): which page items hold
        entries other than the table's at their positions."""
        for attempt in range(ATTEMPTS):
            stats = self._stats(group)
            truth = list(expected)[::-1]
            pages = self._get_pages(group, stats.generation, range(stats.pages))
            if self._stats(group).version != stats.version:
                RACE.sleep(attempt)
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
        raise KeptConflicting(f"read {group}: kept changing under the read")

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
        for attempt in range(ATTEMPTS):
            stats = self._stats(group)
            low, high = max(stats.count - stop, 0), stats.count - 1 - start  # positions from the oldest
            if high < low:
                return []
            numbers = range(stats.locate(low), stats.locate(high) + 1)
            pages = self._get_pages(group, stats.generation, numbers)
            if self._stats(group).version != stats.version:
                RACE.sleep(attempt)
                continue
            oldest_first = [entry for page in numbers for entry in pages[page]]
            first = stats.start(numbers[0])
            return oldest_first[low - first:high - first + 1][::-1]
        raise KeptConflicting(f"read {group}: kept changing under the read")

    def count_newer(self, group: str, sort_key: str, member: str | None = None) -> int:
        """Binary search over the positions, one page item read per step (cached), then the stats
        item again (a write in between retries)."""
        for attempt in range(ATTEMPTS):
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
                RACE.sleep(attempt)
                continue
            if not count or self._stats(group).version == view.stats.version:
                return count - low
            RACE.sleep(attempt)
        raise KeptConflicting(f"read {group}: kept changing under the read")

    def groups(self) -> list[str]:
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


def net_change(removals: Sequence[Removal], adds: Sequence[Entry]) -> Callable[[list[Entry]], list[Entry]]:
    """The change a group's removals then adds make to a whole list of entries (the big path)."""

    def change(old: list[Entry]) -> list[Entry]:
        current = dict(old)
        for member, sort_key in removals:
            if member in current and (sort_key is None or current[member] == sort_key):
                del current[member]
        current.update(adds)
        return list(current.items())

    return change


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
        if self.stats.marked != self.read.marked:
            marker = index._key(MARKED, group)
            if self.stats.marked:
                actions.append({"Put": {"TableName": table, "Item": marker}})
            else:
                actions.append({"Delete": {"TableName": table, "Key": marker}})
        return actions
