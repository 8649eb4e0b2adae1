"""PAGINATION_INDEX_BACKEND=dynamodb: the index in a DynamoDB table of its own.

Per group: one stats item (SK -1: count, version) and page items counted from the OLDEST entry
(page k holds the entries ranked k*P .. k*P+P-1 from the oldest, as one compact list), so an
append touches only the last page, and at(rank) is one GetItem. The table is the index's own, not
the comments table: marker writes never come back through the comments stream.

Writes read the group's items, compute the new list and write the pages that changed with the
stats item in one TransactWriteItems conditioned on the stats version (two consumers: the loser
retries). See docs/backends-dynamodb.md for the cost.
"""
from __future__ import annotations

import secrets
from typing import Iterable, Sequence

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from .base import Entry, IndexUnavailable, NetWriteIndex, Removal, chunked, is_newer, newest_first

STATS = -1
ATTEMPTS = 8
# Page item keys are generation * GENERATION + page: a rewrite too big for one transaction writes a
# new generation, then flips the stats item to it.
GENERATION = 10**9
GENERATION_LIMIT = 10**9


class DynamoDBIndex(NetWriteIndex):
    """OPTIONS: TABLE, ENDPOINT_URL, REGION, PAGE_SIZE, CONNECT_TIMEOUT, READ_TIMEOUT, MAX_ATTEMPTS."""

    def __init__(self, options: dict | None = None):
        super().__init__(options)
        self.table = self.options.get("TABLE", "comments-pidx")
        self.page_size = int(self.options.get("PAGE_SIZE", 20))
        self.client = boto3.client(
            "dynamodb",
            endpoint_url=self.options.get("ENDPOINT_URL") or None,
            region_name=self.options.get("REGION", "us-east-1"),
            aws_access_key_id=self.options.get("ACCESS_KEY_ID", "local"),
            aws_secret_access_key=self.options.get("SECRET_ACCESS_KEY", "local"),
            config=Config(
                connect_timeout=self.options.get("CONNECT_TIMEOUT", 2),
                read_timeout=self.options.get("READ_TIMEOUT", 5),
                retries={"total_max_attempts": self.options.get("MAX_ATTEMPTS", 3), "mode": "standard"},
            ),
        )

    # --- table ----------------------------------------------------------------------------------
    def create_table(self) -> None:
        """Create the index table if missing (the backend also does this lazily on first write)."""
        try:
            self.client.create_table(
                TableName=self.table,
                AttributeDefinitions=[{"AttributeName": "g", "AttributeType": "S"}, {"AttributeName": "p", "AttributeType": "N"}],
                KeySchema=[{"AttributeName": "g", "KeyType": "HASH"}, {"AttributeName": "p", "KeyType": "RANGE"}],
                BillingMode="PAY_PER_REQUEST",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceInUseException":
                raise IndexUnavailable(f"create index table {self.table}: {exc}") from exc

    def delete_table(self) -> None:
        try:
            self.client.delete_table(TableName=self.table)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                raise IndexUnavailable(f"delete index table {self.table}: {exc}") from exc

    def _call(self, method: str, **kwargs):
        try:
            return getattr(self.client, method)(**kwargs)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException" and method != "transact_write_items":
                return {}
            raise
        except BotoCoreError as exc:
            raise IndexUnavailable(f"{method} on {self.table}: {exc}") from exc

    # --- items ----------------------------------------------------------------------------------
    @staticmethod
    def _page_entries(item: dict) -> list[Entry]:
        members = item.get("m", {}).get("L", [])
        keys = item.get("k", {}).get("L", [])
        return [(m["S"], k["S"]) for m, k in zip(members, keys)]

    def _page_item(self, group: str, page: int, entries: Sequence[Entry]) -> dict:
        return {
            "g": {"S": group},
            "p": {"N": str(page)},
            "m": {"L": [{"S": member} for member, _ in entries]},
            "k": {"L": [{"S": key} for _, key in entries]},
        }

    def _stats(self, group: str) -> tuple[int, int, int]:
        """(count, version, generation) of a group; (0, 0, 0) when it has none."""
        item = self._call("get_item", TableName=self.table, Key=self._key(group, STATS), ConsistentRead=True).get("Item")
        return self._stats_of(item)

    @staticmethod
    def _stats_of(item: dict | None) -> tuple[int, int, int]:
        if not item:
            return 0, 0, 0
        return int(item["c"]["N"]), int(item["v"]["N"]), int(item["n"]["N"])

    @staticmethod
    def _key(group: str, number: int) -> dict:
        return {"g": {"S": group}, "p": {"N": str(number)}}

    def _load(self, group: str) -> tuple[list[Entry], int, int, list[int]]:
        """The group's entries oldest first, its version and generation, and the keys of its page
        items of other generations (left by a rewrite that lost a race, or being retired)."""
        items, start = [], None
        while True:
            kwargs = dict(TableName=self.table, KeyConditionExpression="g = :g", ExpressionAttributeValues={":g": {"S": group}}, ConsistentRead=True)
            if start:
                kwargs["ExclusiveStartKey"] = start
            response = self._call("query", **kwargs)
            items.extend(response.get("Items", []))
            start = response.get("LastEvaluatedKey")
            if not start:
                break
        stats = next((item for item in items if item["p"]["N"] == str(STATS)), None)
        _, version, generation = self._stats_of(stats)
        pages, stale = {}, []
        for item in items:
            number = int(item["p"]["N"])
            if number == STATS:
                continue
            if number // GENERATION == generation:
                pages[number % GENERATION] = self._page_entries(item)
            else:
                stale.append(number)
        entries = [entry for page in sorted(pages) for entry in pages[page]]
        return entries, version, generation, stale

    def _plan(self, group: str, old: list[Entry], version: int, generation: int, new: list[Entry], fresh: int | None):
        """(page puts, page deletes, stats action) turning `old` into `new`: in place in
        `generation`, or with `fresh`, every page written anew in that generation."""
        size = self.page_size
        target = generation if fresh is None else fresh
        puts, deletes = [], []
        new_pages = (len(new) + size - 1) // size
        for page in range(new_pages):
            chunk = new[page * size : page * size + size]
            if fresh is not None or chunk != old[page * size : page * size + size]:
                puts.append({"Put": {"TableName": self.table, "Item": dict(self._page_item(group, page, chunk), p={"N": str(target * GENERATION + page)})}})
        if fresh is None:
            for page in range(new_pages, (len(old) + size - 1) // size):
                deletes.append({"Delete": {"TableName": self.table, "Key": self._key(group, generation * GENERATION + page)}})
        key = self._key(group, STATS)
        if version:
            condition = {"ConditionExpression": "v = :v", "ExpressionAttributeValues": {":v": {"N": str(version)}}}
        else:
            condition = {"ConditionExpression": "attribute_not_exists(v)"}
        if new:
            item = dict(key, c={"N": str(len(new))}, v={"N": str(version + 1)}, n={"N": str(target)})
            stats = {"Put": {"TableName": self.table, "Item": item, **condition}}
        else:
            stats = {"Delete": {"TableName": self.table, "Key": key, **condition}}
        return puts, deletes, stats

    def _change(self, changes: dict) -> None:
        """Apply {group: function(old entries oldest first) -> new entries} atomically: one
        TransactWriteItems when it fits (100 items), else every page of the changed groups written
        in new generations first and the stats items flipped to them in one transaction."""
        for _ in range(ATTEMPTS):
            loaded = {group: self._load(group) for group in changes}
            targets = {group: changes[group](loaded[group][0]) for group in changes}
            groups = [group for group in changes if targets[group] != loaded[group][0]]
            if not groups:
                return
            plans = {group: self._plan(group, loaded[group][0], loaded[group][1], loaded[group][2], targets[group], None) for group in groups}
            in_place = [action for plan in plans.values() for action in plan[0] + plan[1] + [plan[2]]]
            retire = []
            if len(in_place) <= 100:
                final = in_place
            else:
                final = []
                for group in groups:
                    entries, version, generation, stale = loaded[group]
                    fresh = secrets.randbelow(GENERATION_LIMIT) + 1
                    puts, _, stats = self._plan(group, entries, version, generation, targets[group], fresh)
                    for part in chunked(puts, 100):
                        self._transact(list(part))
                    final.append(stats)
                    old_pages = (len(entries) + self.page_size - 1) // self.page_size
                    retire += [(group, generation * GENERATION + page) for page in range(old_pages)]
                    retire += [(group, number) for number in stale]
            try:
                for part in chunked(final, 100):
                    self._transact(list(part))
            except ClientError as exc:
                if exc.response["Error"]["Code"] in ("TransactionCanceledException", "TransactionConflictException"):
                    continue
                raise IndexUnavailable(f"write to {self.table}: {exc}") from exc
            for part in chunked(retire, 25):
                requests = [{"DeleteRequest": {"Key": self._key(group, number)}} for group, number in part]
                self._call("batch_write_item", RequestItems={self.table: requests})
            return
        raise IndexUnavailable(f"write to {self.table}: still conflicting after {ATTEMPTS} attempts")

    def _transact(self, actions: list) -> None:
        try:
            self.client.transact_write_items(TransactItems=actions)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException":
                self.create_table()
                self.client.transact_write_items(TransactItems=actions)
            else:
                raise
        except BotoCoreError as exc:
            raise IndexUnavailable(f"write to {self.table}: {exc}") from exc

    # --- writes ---------------------------------------------------------------------------------
    def apply_net(self, adds: dict[str, list[Entry]], removes: dict[str, list[Removal]]) -> None:
        changes = {}
        for group in {*adds, *removes}:
            group_adds, group_removes = adds.get(group, []), removes.get(group, [])

            def change(old: list[Entry], group_adds=group_adds, group_removes=group_removes) -> list[Entry]:
                current = dict(old)
                for member, sort_key in group_removes:
                    if member in current and (sort_key is None or current[member] == sort_key):
                        del current[member]
                current.update(group_adds)
                return newest_first(current.items())[::-1]

            changes[group] = change
        if changes:
            self._change(changes)

    def replace(self, group: str, entries: Sequence[Entry]) -> None:
        self._change({group: lambda old: newest_first(dict(entries).items())[::-1]})

    # --- reads ----------------------------------------------------------------------------------
    def _pages(self, group: str, positions: tuple[int, int] | None) -> tuple[int, dict[int, list[Entry]]]:
        """(count, {page: entries}) for the pages holding positions low..high from the oldest, read
        consistently: the stats item is read before and after, and a write in between retries."""
        for _ in range(ATTEMPTS):
            count, version, generation = self._stats(group)
            if not count or positions is None:
                return count, {}
            low, high = positions if positions[1] >= 0 else (0, -1)
            low, high = max(low, 0), min(high, count - 1)
            numbers = list(range(low // self.page_size, high // self.page_size + 1)) if low <= high else []
            pages = {}
            for part in chunked(numbers, 100):
                keys = [self._key(group, generation * GENERATION + page) for page in part]
                response = self._call("batch_get_item", RequestItems={self.table: {"Keys": keys, "ConsistentRead": True}})
                for item in response.get("Responses", {}).get(self.table, []):
                    pages[int(item["p"]["N"]) % GENERATION] = self._page_entries(item)
                unprocessed = response.get("UnprocessedKeys", {}).get(self.table, {}).get("Keys", [])
                for key in unprocessed:
                    item = self._call("get_item", TableName=self.table, Key=key, ConsistentRead=True).get("Item")
                    if item:
                        pages[int(item["p"]["N"]) % GENERATION] = self._page_entries(item)
            if self._stats(group)[1] == version and len(pages) == len(numbers):
                return count, pages
        raise IndexUnavailable(f"read {group} from {self.table}: kept changing under the read")

    def _page(self, group: str, page: int) -> list[Entry]:
        return self._pages(group, (page * self.page_size, page * self.page_size))[1].get(page, [])

    def count(self, group: str) -> int:
        return self._stats(group)[0]

    def count_many(self, groups: Iterable[str]) -> dict[str, int]:
        """One TransactGetItems per 100 groups: the counts of one batch's groups are read together."""
        groups = list(groups)
        counts = {}
        for part in chunked(groups, 100):
            try:
                response = self.client.transact_get_items(TransactItems=[{"Get": {"TableName": self.table, "Key": self._key(group, STATS)}} for group in part])
            except ClientError as exc:
                if exc.response["Error"]["Code"] == "ResourceNotFoundException":
                    return {group: 0 for group in groups}
                raise IndexUnavailable(f"read counts from {self.table}: {exc}") from exc
            except BotoCoreError as exc:
                raise IndexUnavailable(f"read counts from {self.table}: {exc}") from exc
            for group, answer in zip(part, response["Responses"]):
                counts[group] = self._stats_of(answer.get("Item"))[0]
        return counts

    def at(self, group: str, rank: int) -> Entry | None:
        entries = self.range(group, rank, rank + 1) if rank >= 0 else []
        return entries[0] if entries else None

    def range(self, group: str, start: int, stop: int) -> list[Entry]:
        start = max(start, 0)
        if start >= stop:
            return []
        for _ in range(ATTEMPTS):
            count = self.count(group)
            low, high = count - stop, count - 1 - start  # positions from the oldest
            read_count, pages = self._pages(group, (low, high))
            if read_count != count:
                continue
            entries = [(page * self.page_size + i, entry) for page, chunk in pages.items() for i, entry in enumerate(chunk)]
            return [entry for position, entry in sorted(entries, reverse=True) if max(low, 0) <= position <= high]
        raise IndexUnavailable(f"read {group} from {self.table}: kept changing under the read")

    def count_newer(self, group: str, sort_key: str, member: str | None = None) -> int:
        """Binary search over the pages (oldest first, so the newer entries are a suffix): one
        GetItem per step, then a bisect inside the page found."""

        def newer(entry: Entry) -> bool:
            return is_newer(entry, sort_key, member)

        count = self.count(group)
        low, high = 0, (count + self.page_size - 1) // self.page_size
        while low < high:
            middle = (low + high) // 2
            page = self._page(group, middle)
            if not page or not newer(page[-1]):
                low = middle + 1
            elif newer(page[0]):
                high = middle
            else:
                older = next(i for i, entry in enumerate(page) if newer(entry))
                return count - (middle * self.page_size + older)
        return count - low * self.page_size if low * self.page_size < count else 0

    def groups(self) -> list[str]:
        found, start = [], None
        while True:
            kwargs = dict(TableName=self.table, FilterExpression="p = :s", ExpressionAttributeValues={":s": {"N": str(STATS)}}, ConsistentRead=True)
            if start:
                kwargs["ExclusiveStartKey"] = start
            response = self._call("scan", **kwargs)
            found.extend(item["g"]["S"] for item in response.get("Items", []))
            start = response.get("LastEvaluatedKey")
            if not start:
                return sorted(found)

    def clear(self) -> None:
        for group in self.groups():
            self.replace(group, [])

    def close(self) -> None:
        self.client.close()
