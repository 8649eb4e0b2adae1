"""The Redis backend: one sorted set per group (DESIGN.md, "Backends").

Member = the comment's PK; score = its SK as integer microseconds since the epoch, exact in a double
for the years 1685..2255, so members with equal scores are ordered by member bytes, exactly as the
index orders ties. `at()` is one ZREVRANGE, `count()` one ZCARD.

Keys, all under the configured prefix (default "pidx:"), so the index never touches cache keys:
    <prefix>g:<group>    the group's sorted set (Redis deletes it when it becomes empty)
    <prefix>groups       every group name that may have a sorted set (see groups())
    <prefix>tmp:<uuid>   a group being rebuilt by replace(), swapped in with RENAME

Every write is one MULTI/EXEC transaction, so a reader sees a batch whole or not at all. Plain
Redis (one primary) only: the multi-key transactions need every key on one node.
"""
from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta, timezone
from typing import Iterable, Sequence

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import RedisError

from pagination_index.backends.base import Entry, IndexUnavailable, NetWriteIndex, Removal

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MICROSECOND = timedelta(microseconds=1)
SORT_KEY = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{6})Z")
# Integers up to 2**53 are exact in the double Redis keeps as the score.
MAX_EXACT_SCORE = 2**53
# Members per ZADD/ZREM command, and commands sent per round trip while filling a temporary key.
CHUNK = 5000
COMMANDS_PER_ROUND_TRIP = 20
# count_newer(): members read at once from a run of equal scores; longer runs are bisected by rank.
TIE_FETCH = 256
# A temporary key left by a replace() that died half-way expires by itself.
TEMP_KEY_SECONDS = 3600

# ZREM each ARGV member whose score still equals the score after it (the stream's conditional
# remove). Scores are integers below 2**53, exact both as Redis doubles and as Lua numbers.
ZREM_IF_SCORE = """
local removed = 0
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return removed
"""

# Removes a name from the registry only if its group is (still) empty, atomically.
PRUNE_IF_EMPTY = "if redis.call('EXISTS', KEYS[1]) == 0 then return redis.call('SREM', KEYS[2], ARGV[1]) end return 0"


def sort_key_score(sort_key: str) -> int:
    """'2021-08-25T13:00:00.123456Z' -> microseconds since the epoch (ValueError if not that form)."""
    match = SORT_KEY.fullmatch(sort_key)
    if not match:
        raise ValueError(f"sort key {sort_key!r} is not of the form YYYY-MM-DDTHH:MM:SS.ffffffZ")
    score = (datetime(*map(int, match.groups()), tzinfo=timezone.utc) - EPOCH) // MICROSECOND
    if abs(score) > MAX_EXACT_SCORE:
        raise ValueError(f"sort key {sort_key!r} is outside the years a Redis score holds exactly")
    return score


def score_sort_key(score: float | int) -> str:
    """The inverse of sort_key_score: the exact SK string back from a score."""
    moment = EPOCH + timedelta(microseconds=int(score))
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:{moment.minute:02d}:"
        f"{moment.second:02d}.{moment.microsecond:06d}Z"
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _chunks(items: list, size: int = CHUNK):
    for start in range(0, len(items), size):
        yield items[start : start + size]


class RedisIndex(NetWriteIndex):
    """OPTIONS: CACHE (the CACHES alias of a django-redis cache, default "index") and KEY_PREFIX."""

    def __init__(self, options=None):
        super().__init__(options)
        self.alias = self.options.get("CACHE", "index")
        self.prefix = self.options.get("KEY_PREFIX", "pidx:")
        if self.alias not in settings.CACHES:
            raise ImproperlyConfigured(f"RedisIndex: no CACHES[{self.alias!r}] (a django_redis.cache.RedisCache)")
        if not self.prefix:
            raise ImproperlyConfigured("RedisIndex: KEY_PREFIX must not be empty (it keeps index keys apart)")
        self.registry = f"{self.prefix}groups"
        self._client = None
        self._script = None

    @property
    def _zrem_if_score(self):
        if self._script is None:
            self._script = self.client.register_script(ZREM_IF_SCORE)
        return self._script

    @property
    def client(self):
        if self._client is None:
            from django_redis import get_redis_connection

            self._client = get_redis_connection(self.alias)
        return self._client

    def key(self, group: str) -> str:
        return f"{self.prefix}g:{group}"

    # --- writes -------------------------------------------------------------------------------
    def apply_net(self, adds: dict[str, list[Entry]], removes: dict[str, list[Removal]]) -> None:
        """Every add and remove, across groups, in one MULTI/EXEC (conditional removes as a script
        inside it, so they see the set as the transaction leaves it)."""
        scored = {group: {member: sort_key_score(sort_key) for member, sort_key in entries}
                  for group, entries in adds.items() if entries}
        removes = {group: removals for group, removals in removes.items() if removals}
        if not scored and not removes:
            return
        try:
            with self.client.pipeline(transaction=True) as pipe:
                for group, removals in removes.items():
                    always = [member for member, sort_key in removals if sort_key is None]
                    for chunk in _chunks(always):
                        pipe.zrem(self.key(group), *chunk)
                    matching = [arg for member, sort_key in removals if sort_key is not None
                                for arg in (member, sort_key_score(sort_key))]
                    for chunk in _chunks(matching, 2 * CHUNK):
                        self._zrem_if_score(keys=[self.key(group)], args=chunk, client=pipe)
                for group, mapping in scored.items():
                    for chunk in _chunks(list(mapping.items())):
                        pipe.zadd(self.key(group), dict(chunk))
                if scored:
                    pipe.sadd(self.registry, *scored)
                pipe.execute()
        except RedisError as exc:
            raise IndexUnavailable(f"redis index: {exc}") from exc

    def replace(self, group: str, entries: Sequence[Entry]) -> None:
        """Build the new set under a temporary key, then swap it in with RENAME in one transaction."""
        scored = {member: sort_key_score(sort_key) for member, sort_key in entries}
        key = self.key(group)
        temp = f"{self.prefix}tmp:{uuid.uuid4().hex}"
        try:
            if not scored:
                self.client.unlink(key)
                return
            with self.client.pipeline(transaction=False) as pipe:
                for number, chunk in enumerate(_chunks(list(scored.items())), start=1):
                    pipe.zadd(temp, dict(chunk))
                    if number == 1:
                        pipe.expire(temp, TEMP_KEY_SECONDS)
                    if number % COMMANDS_PER_ROUND_TRIP == 0:
                        pipe.execute()
                pipe.execute()
            with self.client.pipeline(transaction=True) as pipe:
                pipe.unlink(key)  # frees a big old set in the background, not inside the swap
                pipe.rename(temp, key)
                pipe.persist(key)  # RENAME carries the temporary key's expiry over
                pipe.sadd(self.registry, group)
                pipe.execute()
        except RedisError as exc:
            self._discard(temp)
            raise IndexUnavailable(f"redis index: {exc}") from exc

    def _discard(self, temp: str) -> None:
        try:
            self.client.unlink(temp)
        except RedisError:
            pass  # it expires by itself

    def clear(self) -> None:
        """Delete every key under this index's prefix, and nothing else."""
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self.prefix) + "*"
        try:
            batch = []
            for key in self.client.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    self.client.unlink(*batch)
                    batch = []
            if batch:
                self.client.unlink(*batch)
        except RedisError as exc:
            raise IndexUnavailable(f"redis index: {exc}") from exc

    # --- reads --------------------------------------------------------------------------------
    def count(self, group: str) -> int:
        try:
            return self.client.zcard(self.key(group))
        except RedisError as exc:
            raise IndexUnavailable(f"redis index: {exc}") from exc

    def count_many(self, groups: Iterable[str]) -> dict[str, int]:
        """One round trip, one snapshot: the ZCARDs run inside MULTI/EXEC."""
        groups = list(groups)
        if not groups:
            return {}
        try:
            with self.client.pipeline(transaction=True) as pipe:
                for group in groups:
                    pipe.zcard(self.key(group))
                return dict(zip(groups, pipe.execute()))
        except RedisError as exc:
            raise IndexUnavailable(f"redis index: {exc}") from exc

    def at(self, group: str, rank: int) -> Entry | None:
        found = self.range(group, rank, rank + 1)
        return found[0] if found else None

    def range(self, group: str, start: int, stop: int) -> list[Entry]:
        start = max(start, 0)
        if stop <= start:
            return []  # and never a negative index, which Redis counts from the end
        try:
            found = self.client.zrevrange(self.key(group), start, stop - 1, withscores=True)
        except RedisError as exc:
            raise IndexUnavailable(f"redis index: {exc}") from exc
        return [(_text(member), score_sort_key(score)) for member, score in found]

    def count_newer(self, group: str, sort_key: str, member: str | None = None) -> int:
        return self.count_newer_many([group], sort_key, member)[group]

    def count_newer_many(self, groups: Iterable[str], sort_key: str, member: str | None = None) -> dict[str, int]:
        """ZCOUNT of the greater scores; with a member, plus the members greater than it in the run of
        equal scores (Redis orders a run by member bytes, as the index orders ties; ZRANGEBYLEX is
        undefined across scores, so the run is read: whole when short, which is one round trip for
        every group together, else bisected by rank)."""
        groups = list(groups)
        score = sort_key_score(sort_key)
        wanted = None if member is None else _bytes(member)
        try:
            with self.client.pipeline(transaction=True) as pipe:
                for group in groups:
                    pipe.zcount(self.key(group), f"({score}", "+inf")
                    if wanted is not None:
                        pipe.zrevrangebyscore(self.key(group), score, score, start=0, num=TIE_FETCH + 1)
                replies = iter(pipe.execute())
            counts = {}
            for group in groups:
                newer = next(replies)
                if wanted is not None:
                    run = [_bytes(name) for name in next(replies)]
                    if len(run) <= TIE_FETCH:
                        newer += sum(1 for name in run if name > wanted)
                    else:
                        newer += self._greater_in_run(group, newer, score, wanted)
                counts[group] = newer
        except RedisError as exc:
            raise IndexUnavailable(f"redis index: {exc}") from exc
        return counts

    def _greater_in_run(self, group: str, first: int, score: int, wanted: bytes) -> int:
        """In a long run of equal scores starting at rank `first`: how many members are greater."""
        low, high = 0, self.client.zcount(self.key(group), score, score)
        while low < high:
            middle = (low + high) // 2
            [name] = self.client.zrevrange(self.key(group), first + middle, first + middle) or [b""]
            if _bytes(name) > wanted:
                low = middle + 1
            else:
                high = middle
        return low

    def groups(self) -> list[str]:
        """Every non-empty group. Each write that creates a group's set adds its name to the registry
        in the same transaction, so the registry holds every group; names whose set has emptied
        since are pruned here (atomically, in case a writer refills the group meanwhile)."""
        try:
            names = sorted(_text(name) for name in self.client.smembers(self.registry))
            with self.client.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.exists(self.key(name))
                present = pipe.execute()
            empty = [name for name, exists in zip(names, present) if not exists]
            if empty:
                prune = self.client.register_script(PRUNE_IF_EMPTY)
                with self.client.pipeline(transaction=False) as pipe:
                    for name in empty:
                        prune(keys=[self.key(name), self.registry], args=[name], client=pipe)
                    pipe.execute()
        except RedisError as exc:
            raise IndexUnavailable(f"redis index: {exc}") from exc
        return [name for name, exists in zip(names, present) if exists]

    def close(self) -> None:
        self._client = self._script = None  # the connection pool belongs to django-redis and outlives us
