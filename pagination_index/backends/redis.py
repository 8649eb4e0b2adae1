"""The Redis backend: one sorted set per group, on one Redis or a Redis Cluster (docs/backends-redis.md).

Member = the comment's PK; score = its SK as integer microseconds since the epoch, exact in a double
for the years 1685..2255. `at()` is one ZREVRANGE, `count()` one ZCARD.

Members are stored in a binary form (encode_member): a PK of 32 lowercase hex digits (a uuid4 hex, as
every comment's is) as its 16 bytes, which puts its allocation in jemalloc's 24/32-byte class
instead of 40/48 (issue 29); any other member as its UTF-8, plus one b"\x00" when that is exactly 16
bytes long or already ends with a NUL, so that a stored member of 16 bytes is always a uuid and
decoding is unambiguous. Redis orders equal scores by stored bytes: among uuid members that is the
hex text's order, among other members the text's (UTF-8 bytes, code point order; members that
contain NUL aside), as the index orders ties. A uuid member and a non-uuid member at the same score
may be ordered differently from their texts; the comments' PKs are all uuids, so only hand-made
data mixes them. count_newer() compares stored bytes with stored bytes, so its ranks always agree
with the set's own order.

Indexes written before the binary form hold uuids as their 32-byte text (both_forms), which still
decodes to the same PK. Every write also removes a member's legacy form, so no entry is left behind
or doubled; `check_index` (check_format) finds such an index and `rebuild_index` rewrites it.

Keys, all under the configured prefix (default "pidx:"), so the index never touches other keys. A
group's "family" is its name up to the first "/" (the product: "SKU" and its rating groups "SKU/4"),
and it is the key's hash tag, so a family's keys share one cluster hash slot:
    <prefix>{<family>}<rest>            the group's sorted set (Redis deletes it when it empties)
    <prefix>tmp:{<family>}<rest>:<uuid> a group being rebuilt by replace(), swapped in with RENAME

Every write is a MULTI/EXEC transaction per hash slot: on one Redis, one transaction for a whole
batch; on a cluster, one per product, since a transaction cannot span slots. groups() is a SCAN of
every primary, so no key is shared between products.
"""
from __future__ import annotations

import re
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Iterable
from urllib.parse import unquote, urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured
from redis.backoff import NoBackoff
from redis.client import Pipeline
from redis.crc import key_slot
from redis.exceptions import AskError, ClusterDownError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MovedError, RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.exceptions import TryAgainError
from redis.retry import Retry

from pagination_index.backends.base import Entry, NetWriteIndex, Removal, batched, chunked
from pagination_index.sortkeys import micros_sort_key, sort_key_micros

# Integers up to 2**53 are exact in the double Redis keeps as the score.
MAX_EXACT_SCORE = 2**53
# Members per ZADD/ZREM command, and commands sent per round trip while filling a temporary key.
CHUNK = 5000
COMMANDS_PER_ROUND_TRIP = 20
# count_newer(): members read at once from a run of equal scores; longer runs are bisected by rank.
TIE_FETCH = 256
# A temporary key left by a replace() that died half-way expires by itself.
TEMP_KEY_SECONDS = 3600

# ARGV in triples (stored member, its legacy form or the stored one again, score): ZREM each form
# whose score still equals that score (the stream's conditional remove). Scores are integers below
# 2**53, exact both as Redis doubles and as Lua numbers.
ZREM_IF_SCORE = """
local removed = 0
for i = 1, #ARGV, 3 do
  local wanted = tonumber(ARGV[i + 2])
  for j = i, i + 1 do
    local score = redis.call('ZSCORE', KEYS[1], ARGV[j])
    if score and tonumber(score) == wanted then
      removed = removed + redis.call('ZREM', KEYS[1], ARGV[j])
    end
  end
end
return removed
"""
# check_format(): group keys sampled for a member in the legacy (text) form.
FORMAT_SAMPLE_KEYS = 48

# replace()'s swap: UNLINK frees a big old set in the background, not inside the swap; RENAME carries
# the temporary key's expiry over, so PERSIST drops it.
SWAP_IN = "redis.call('UNLINK', KEYS[2]) redis.call('RENAME', KEYS[1], KEYS[2]) return redis.call('PERSIST', KEYS[2])"

# What a lost node, a cluster without a slot's owner or a refused connection raise: all an
# IndexUnavailable, through the funnel on every public method (BaseIndex.unavailable_errors).
FAILURES = (RedisError, RedisClusterException)
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
# redis+sentinel://[[USER]:PASSWORD@]HOST:PORT,HOST:PORT,.../SERVICE/DB: the primary that these Sentinels
# name SERVICE (the sentinels' port defaults to 26379; the password is the primary's and replicas').
SENTINEL_SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
SENTINEL_PORT = 26379
# django-redis connection options that mean the same to a cluster client.
CLUSTER_KWARGS = {"SOCKET_CONNECT_TIMEOUT": "socket_connect_timeout", "SOCKET_TIMEOUT": "socket_timeout",
                  "USERNAME": "username", "PASSWORD": "password"}


def sort_key_score(sort_key: str) -> int:
    """A sort key as its Redis score (ValueError if not a sort key, or outside the exact range)."""
    score = sort_key_micros(sort_key)
    if abs(score) > MAX_EXACT_SCORE:
        raise ValueError(f"sort key {sort_key!r} is outside the years a Redis score holds exactly")
    return score


_HEX32 = re.compile(r"[0-9a-f]{32}")
_LEGACY_UUID = re.compile(rb"[0-9a-f]{32}")
UUID_BYTES = 16


def encode_member(member: str) -> bytes:
    """A member as stored: a uuid hex as its 16 bytes; any other text as its UTF-8, with one NUL
    appended when that is 16 bytes long or ends with a NUL (see the module docstring)."""
    if len(member) == 32 and _HEX32.fullmatch(member):
        return bytes.fromhex(member)
    data = member.encode()
    return data + b"\x00" if len(data) == UUID_BYTES or data.endswith(b"\x00") else data


def decode_member(stored: bytes) -> str:
    """The member a stored one holds (encode_member's inverse; a legacy 32-byte text comes back as itself)."""
    if len(stored) == UUID_BYTES:
        return stored.hex()
    return (stored[:-1] if stored.endswith(b"\x00") else stored).decode()


def both_forms(member: str) -> tuple[bytes, bytes]:
    """(the stored form, the legacy form): a uuid member as indexes before the binary form stored it,
    its 32-byte text; any other member's forms are one (its legacy UTF-8 of 16 bytes would be some
    uuid's stored form: such an index needs rebuild_index, see the module docstring)."""
    stored = encode_member(member)
    return stored, (member.encode() if len(stored) == UUID_BYTES else stored)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def cluster_location(location: str, cluster: bool = False) -> tuple[str, bool]:
    """(the plain redis:// URL, whether it names a cluster): a redis+cluster:// URL names one."""
    parts = urlsplit(location)
    if parts.scheme in CLUSTER_SCHEMES:
        return urlunsplit(parts._replace(scheme=CLUSTER_SCHEMES[parts.scheme])), True
    return location, cluster


@dataclass(frozen=True)
class SentinelLocation:
    sentinels: list[tuple[str, int]]
    service: str
    db: int
    username: str | None
    password: str | None
    ssl: bool


def sentinel_location(location: str) -> SentinelLocation | None:
    """What a redis+sentinel:// URL names (None for any other URL)."""
    parts = urlsplit(location)
    if parts.scheme not in SENTINEL_SCHEMES:
        return None
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    sentinels = []
    for address in filter(None, hosts.split(",")):
        host, colon, port = address.rpartition(":")
        sentinels.append((host, int(port)) if colon else (address, SENTINEL_PORT))
    service, _, db = parts.path.strip("/").partition("/")
    if not sentinels or not service or not (db or "0").isdigit():
        raise ImproperlyConfigured(f"RedisIndex: {location!r} is not redis+sentinel://HOST:PORT,HOST:PORT/SERVICE/DB")
    return SentinelLocation(sentinels, unquote(service), int(db or 0), unquote(username) or None,
                            unquote(password) or None, SENTINEL_SCHEMES[parts.scheme] == "rediss")


def connect_sentinel(location: SentinelLocation, options: dict):
    """The primary the Sentinels name, through redis-py's SentinelConnectionPool: each new connection
    asks the Sentinels where the primary is, and one that finds it demoted (READONLY) or gone drops,
    so the next command follows a failover. The Sentinels are asked with the same timeouts."""
    from redis.sentinel import Sentinel

    kwargs = {name: options[key] for key, name in CLUSTER_KWARGS.items() if options.get(key)}
    if location.username:
        kwargs["username"] = location.username
    if location.password:
        kwargs["password"] = location.password
    timeouts = {name: value for name, value in kwargs.items() if name.startswith("socket_")}
    # No retries of a Sentinel client's own: asking the next Sentinel is the retry. redis-py's default
    # (several attempts with backoff, each after a connect timeout) held a page for seconds per
    # Sentinel when a partition dropped their packets (bench.faults_net, web cut from Redis).
    no_retry = {"retry": Retry(NoBackoff(), 0)}
    manager = Sentinel(location.sentinels,
                       sentinel_kwargs={**timeouts, **no_retry, **options.get("SENTINEL_KWARGS", {})})
    return manager.master_for(location.service, db=location.db, ssl=location.ssl, **kwargs,
                              **options.get("CONNECTION_POOL_KWARGS", {}))


class ReplicasBehind(RedisError):
    """A write's WAIT saw fewer replicas acknowledge it than required (an IndexUnavailable to callers:
    the stream consumer keeps the batch's checkpoint and applies it again)."""


class FencedOut(RedisError):
    """A write carried a lease epoch older than one already applied for its shard: the writer lost the
    shard's lease (an IndexUnavailable to it; its next lease renewal finds the shard gone)."""


# A product's fence: a hash of shard -> the newest lease epoch applied to the product from it, in the
# product's hash slot. Kept for twice the stream's 24 h retention after the product's last write.
FENCE_SECONDS = 2 * 24 * 3600


class ReplicatedPipeline(Pipeline):
    """A MULTI/EXEC followed by WAIT on the same connection, in the same retry: WAIT counts the
    replicas that have every write of *its* connection, so it must follow the transaction there (a
    connection retried after a drop re-sends both). `acknowledged` is WAIT's answer."""

    def __init__(self, client, replicas: int, timeout_seconds: float):
        super().__init__(client.connection_pool, client.response_callbacks, True, None)
        self.replicas = replicas
        self.timeout_ms = max(int(timeout_seconds * 1000), 1)  # WAIT's 0 would block forever
        self.acknowledged: int | None = None

    def _execute_transaction(self, connection, commands, raise_on_error):
        replies = super()._execute_transaction(connection, commands, raise_on_error)
        connection.send_command("WAIT", self.replicas, self.timeout_ms)
        self.acknowledged = int(connection.read_response())
        return replies

    def execute(self, raise_on_error: bool = True):
        replies = super().execute(raise_on_error)
        if self.acknowledged is not None and self.acknowledged < self.replicas:
            raise ReplicasBehind(f"{self.acknowledged} of {self.replicas} replicas acknowledged the write "
                                 f"within {self.timeout_ms} ms")
        return replies


def connect(options: dict):
    """A client for OPTIONS: redis-py's RedisCluster for a cluster (django-redis has no cluster mode),
    redis-py's Sentinel for a redis+sentinel:// URL (django-redis's sentinel factory is a global
    setting, which would turn every other Redis of the project into a sentinel one), else
    django-redis's connection factory (its pools, parser and options), never a cache API, whose
    clear() would FLUSHDB the index."""
    sentinel = sentinel_location(options["LOCATION"])
    if sentinel is not None:
        return connect_sentinel(sentinel, options)
    location, cluster = cluster_location(options["LOCATION"], options.get("CLUSTER", False))
    if cluster:
        from redis.cluster import RedisCluster

        kwargs = {name: options[key] for key, name in CLUSTER_KWARGS.items() if options.get(key)}
        # Slots still served keep answering while another range has no owner (a 503 for those only).
        return RedisCluster.from_url(location, require_full_coverage=False, **kwargs,
                                     **options.get("CONNECTION_POOL_KWARGS", {}))
    from django_redis.pool import get_connection_factory

    return get_connection_factory(options=options).connect(location)


def redis_database(location: str) -> tuple:
    """What names one Redis database, whatever the URL's spelling: (host, port, db) or (socket, db)."""
    sentinel = sentinel_location(location)
    if sentinel is not None:
        # Named the way django-redis's SentinelClient names it in a cache LOCATION: redis://SERVICE/DB.
        return (sentinel.service.lower(), 6379, sentinel.db)
    parts = urlsplit(cluster_location(location)[0])
    query = dict(pair.partition("=")[::2] for pair in parts.query.split("&") if pair)
    if parts.scheme == "unix":
        return (parts.path, int(query.get("db", 0)))
    path = parts.path.strip("/")
    database = int(query.get("db") or (path if path.isdigit() else 0))
    return ((parts.hostname or "localhost").lower(), parts.port or 6379, database)


def group_of_key(key: str, prefix: str) -> str:
    """The group a group key holds (the inverse of RedisIndex.key): the family has no "/", so the
    hash tag's closing brace is the character before the first "/", or the last one."""
    body = key[len(prefix) + 1 :]
    end = body.find("/")
    end = len(body) if end < 0 else end
    return body[: end - 1] + body[end:]


class RedisIndex(NetWriteIndex):
    """OPTIONS: LOCATION (redis://, rediss:// or unix:// URL; redis+cluster:// or rediss+cluster://
    for a Redis Cluster; redis+sentinel://HOST:PORT,HOST:PORT/SERVICE/DB for the primary that Sentinels
    manage, with SENTINEL_KWARGS for the connections to the Sentinels themselves), CLUSTER (True: LOCATION is a node of a cluster), KEY_PREFIX, and
    django-redis's connection options (SOCKET_CONNECT_TIMEOUT, SOCKET_TIMEOUT, CONNECTION_POOL_KWARGS,
    PASSWORD, ...), which a cluster client takes too."""

    # Sort keys are stored as integers: ISO-8601 timestamps with microseconds (sortkeys.py).
    sort_keys = "iso8601"

    unavailable_errors = FAILURES
    error_label = "redis index"
    # Members as stored and back (the RESP backend's server stores them as text).
    encode = staticmethod(encode_member)
    decode = staticmethod(decode_member)

    def __init__(self, options=None):
        super().__init__(options)
        self.prefix = self.options.get("KEY_PREFIX", "pidx:")
        if not self.options.get("LOCATION"):
            raise ImproperlyConfigured("RedisIndex: OPTIONS['LOCATION'] must be a Redis URL (PAGINATION_INDEX_REDIS_URL)")
        if not self.prefix:
            raise ImproperlyConfigured("RedisIndex: KEY_PREFIX must not be empty (it keeps index keys apart)")
        if "{" in self.prefix or "}" in self.prefix:
            raise ImproperlyConfigured("RedisIndex: KEY_PREFIX must not contain braces (the keys' hash tag follows it)")
        self.cluster = cluster_location(self.options["LOCATION"], self.options.get("CLUSTER", False))[1]
        self.sentinel = sentinel_location(self.options["LOCATION"]) is not None
        from pagination_index.conf import index_settings

        self.wait_replicas = int(index_settings.SYNC["WAIT_REPLICAS"])
        self.wait_timeout = float(index_settings.SYNC["WAIT_TIMEOUT_SECONDS"])
        self._client = None
        self._fencing = threading.local()

    @property
    def partial_failures(self) -> bool:
        """A cluster that lost a primary still serves every other primary's slots."""
        return self.cluster

    @property
    def client(self):
        if self._client is None:
            self._client = connect(self.options)  # a cluster client asks a node for the slot map at once
        return self._client

    def key(self, group: str) -> str:
        family, slash, rest = group.partition("/")
        return f"{self.prefix}{{{family}}}{slash}{rest}"

    def _by_slot(self, groups: Iterable[str]) -> list[list[str]]:
        """The groups in batches that one MULTI/EXEC may cover: all of them on one Redis; on a
        cluster, those whose keys share a hash slot (a product and its rating groups)."""
        groups = list(groups)
        if not self.cluster:
            return [groups] if groups else []
        batches: dict[int, list[str]] = {}
        for group in groups:
            batches.setdefault(key_slot(self.key(group).encode()), []).append(group)
        return list(batches.values())

    # --- writes -------------------------------------------------------------------------------
    @contextmanager
    def fenced(self, epochs: dict[str, int]):
        """apply_net() inside checks and records these lease epochs in each written product's fence."""
        self._fencing.epochs = dict(epochs)
        try:
            yield
        finally:
            self._fencing.epochs = None

    def fence_key(self, group: str) -> str:
        return f"{self.prefix}fence:{{{group.partition('/')[0]}}}"

    def apply_net(self, adds: dict[str, list[Entry]], removes: dict[str, list[Removal]]) -> None:
        """Every add and remove in one MULTI/EXEC per hash slot (conditional removes as a script
        inside it, so they see the set as the transaction leaves it). On a cluster a batch that
        fails half-way may have committed some products: the stream re-applies the whole batch,
        which is idempotent. Inside fenced(), each product's fence is WATCHed and read first: an
        epoch of ours older than the fence's is FencedOut, and a fence that changes before EXEC
        aborts the transaction (WatchError); the transaction raises the fences to our epochs."""
        scored = {group: {member: sort_key_score(sort_key) for member, sort_key in entries}
                  for group, entries in adds.items() if entries}
        removes = {group: removals for group, removals in removes.items() if removals}
        epochs = getattr(self._fencing, "epochs", None)
        for batch in self._by_slot(set(scored) | set(removes)):
            fences = sorted({self.fence_key(group) for group in batch}) if epochs else []
            with self._transaction(self.key(batch[0]), direct=bool(fences)) as pipe:
                if fences:
                    self._check_fences(pipe, fences, epochs)
                for group in batch:
                    self._queue_writes(pipe, group, removes.get(group, []), scored.get(group, {}))
                for fence in fences:
                    pipe.hset(fence, mapping=epochs)
                    pipe.expire(fence, FENCE_SECONDS)
                self._execute(pipe)

    def _check_fences(self, pipe, fences: list[str], epochs: dict[str, int]) -> None:
        pipe.watch(*fences)
        shards = list(epochs)
        for fence in fences:
            for shard, seen in zip(shards, pipe.hmget(fence, shards)):
                if seen is not None and int(seen) > epochs[shard]:
                    raise FencedOut(f"shard {shard}: lease epoch {epochs[shard]} is older than {int(seen)}, "
                                    "already applied by another consumer")
        pipe.multi()

    def _transaction(self, key: str, direct: bool = False):
        """A transaction for writes to `key`'s slot: with SYNC["WAIT_REPLICAS"], one that WAITs for
        that many replicas after its EXEC; on a cluster, when waiting or fencing (`direct`), sent to
        the primary of the key's slot through its own connection pool (WAIT counts one connection's
        writes; WATCH holds one connection)."""
        if not (self.wait_replicas or direct):
            return self.client.pipeline(transaction=True)
        node = self.client.get_node_from_key(key).redis_connection if self.cluster else self.client
        if not self.wait_replicas:
            return node.pipeline(transaction=True)
        return ReplicatedPipeline(node, self.wait_replicas, self.wait_timeout)

    def _execute(self, pipe):
        """A cluster transaction sent to a node directly meets a slot that moved or a node that went
        as an error: the cluster client reads the slot map again, and the caller's retry goes to
        the slot's owner now (the stream applies the batch again)."""
        try:
            return pipe.execute()
        except (MovedError, AskError, RedisConnectionError, RedisTimeoutError):
            if self.cluster and isinstance(pipe, ReplicatedPipeline):
                self.client.nodes_manager.initialize()
            raise

    def _queue_writes(self, pipe, group: str, removals: list[Removal], mapping: dict[str, int]) -> None:
        """Removes take both forms of a member; adds first drop a legacy form, which an index written
        before the binary form may hold (a moved entry's ZADD would otherwise leave it beside)."""
        key = self.key(group)
        always = [stored for member, sort_key in removals if sort_key is None for stored in set(both_forms(member))]
        always += [legacy for stored, legacy in map(both_forms, mapping) if legacy != stored]
        for chunk in chunked(always, CHUNK):
            pipe.zrem(key, *chunk)
        matching = [arg for member, sort_key in removals if sort_key is not None
                    for arg in (*both_forms(member), sort_key_score(sort_key))]
        for chunk in chunked(matching, 3 * CHUNK):
            pipe.execute_command("EVAL", ZREM_IF_SCORE, 1, key, *chunk)  # ClusterPipeline has no eval()
        for chunk in chunked(list(mapping.items()), CHUNK):
            pipe.zadd(key, {encode_member(member): score for member, score in chunk})

    def replace(self, group: str, entries: Iterable[Entry]) -> None:
        """Build the new set under a temporary key in the group's slot, a chunk of the entries at a
        time (ZADD keeps a repeated member's last score), then swap it in with RENAME in one script
        (atomic like MULTI/EXEC; a cluster pipeline refuses RENAME)."""
        key = self.key(group)
        temp = f"{self.prefix}tmp:{key[len(self.prefix):]}:{uuid.uuid4().hex}"
        try:
            written = False
            with self.client.pipeline(transaction=False) as pipe:
                for number, chunk in enumerate(batched(entries, CHUNK), start=1):
                    pipe.zadd(temp, {encode_member(member): sort_key_score(sort_key) for member, sort_key in chunk})
                    if number == 1:
                        pipe.expire(temp, TEMP_KEY_SECONDS)
                    if number % COMMANDS_PER_ROUND_TRIP == 0:
                        pipe.execute()
                    written = True
                pipe.execute()
            with self._transaction(key) as pipe:  # the swap, like a batch, waits for the replicas
                if written:
                    pipe.execute_command("EVAL", SWAP_IN, 2, temp, key)  # ClusterPipeline has no eval()
                else:
                    pipe.unlink(key)
                self._execute(pipe)
        except FAILURES:
            self._discard(temp)
            raise

    def _discard(self, temp: str) -> None:
        try:
            self.client.unlink(temp)
        except FAILURES:
            pass  # it expires by itself

    def _scan(self, pattern: str) -> Iterable:
        """Keys matching a glob, from every primary (scan_iter visits each node of a cluster)."""
        return self.client.scan_iter(match=glob_escape(self.prefix) + pattern, count=1000)

    def clear(self) -> None:
        """Delete every key under this index's prefix, and nothing else."""
        with self.client.pipeline(transaction=False) as pipe:
            for number, key in enumerate(self._scan("*"), start=1):
                pipe.unlink(key)  # one key a command: a cluster routes each to its node
                if number % 1000 == 0:
                    pipe.execute()
            pipe.execute()

    # --- reads --------------------------------------------------------------------------------
    def _reader(self, key: str):
        """The client for one read of a key. On a cluster: the pool of the key's primary, as the
        slot map says, which the cluster client itself uses (its routing of each command costs
        about 28 µs of CPU, 40 % of a read's: docs/backends-redis.md); a read that meets a slot
        on the move (MOVED, ASK) or a lost node is read again through the cluster client
        (_read), which follows the redirect and refreshes its map."""
        if not self.cluster:
            return self.client
        return self.client.get_node_from_key(key).redis_connection or self.client

    def _read(self, key: str, command: str, *args, **kwargs):
        try:
            return getattr(self._reader(key), command)(key, *args, **kwargs)
        except (MovedError, AskError, TryAgainError, ClusterDownError, RedisConnectionError, RedisTimeoutError):
            if not self.cluster:
                raise
            return getattr(self.client, command)(key, *args, **kwargs)

    def count(self, group: str) -> int:
        return self._read(self.key(group), "zcard")

    def count_many(self, groups: Iterable[str]) -> dict[str, int]:
        """One round trip (one per node on a cluster). On one Redis the ZCARDs run inside MULTI/EXEC,
        one snapshot; on a cluster each count is exact but products are counted node by node."""
        groups = list(groups)
        if not groups:
            return {}
        with self.client.pipeline(transaction=not self.cluster) as pipe:
            for group in groups:
                pipe.zcard(self.key(group))
            return dict(zip(groups, pipe.execute()))

    def at(self, group: str, rank: int) -> Entry | None:
        found = self.range(group, rank, rank + 1)
        return found[0] if found else None

    def range(self, group: str, start: int, stop: int) -> list[Entry]:
        start = max(start, 0)
        if stop <= start:
            return []  # and never a negative index, which Redis counts from the end
        found = self._read(self.key(group), "zrevrange", start, stop - 1, withscores=True)
        return [(self.decode(member), micros_sort_key(score)) for member, score in found]

    def count_newer(self, group: str, sort_key: str, member: str | None = None) -> int:
        return self.count_newer_many([group], sort_key, member)[group]

    def count_newer_many(self, groups: Iterable[str], sort_key: str, member: str | None = None) -> dict[str, int]:
        """ZCOUNT of the greater scores; with a member, plus the members greater than it in the run of
        equal scores (Redis orders a run by stored bytes, so the member's stored form is compared with
        the stored ones; ZRANGEBYLEX is undefined across scores, so the run is read: whole when short,
        which is one round trip per hash slot, else bisected by rank)."""
        score = sort_key_score(sort_key)
        wanted = None if member is None else self.encode(member)
        counts = {}
        for batch in self._by_slot(groups):
            with self.client.pipeline(transaction=True) as pipe:
                for group in batch:
                    pipe.zcount(self.key(group), f"({score}", "+inf")
                    if wanted is not None:
                        pipe.zrevrangebyscore(self.key(group), score, score, start=0, num=TIE_FETCH + 1)
                replies = iter(pipe.execute())
            for group in batch:
                newer = next(replies)
                if wanted is not None:
                    run = next(replies)
                    if len(run) <= TIE_FETCH:
                        newer += sum(1 for name in run if name > wanted)
                    else:
                        newer += self._greater_in_run(group, newer, score, wanted)
                counts[group] = newer
        return counts

    def _greater_in_run(self, group: str, first: int, score: int, wanted: bytes) -> int:
        """In a long run of equal scores starting at rank `first`: how many members are greater."""
        low, high = 0, self.client.zcount(self.key(group), score, score)
        while low < high:
            middle = (low + high) // 2
            [name] = self.client.zrevrange(self.key(group), first + middle, first + middle) or [b""]
            if name > wanted:
                low = middle + 1
            else:
                high = middle
        return low

    def check_format(self) -> list[str]:
        """Members still in the legacy form (a uuid as its 32-byte text), in a sample of the group keys
        a SCAN meets first: each key's oldest entry, the one most likely written before the upgrade."""
        keys = list(islice(self._scan("{*"), FORMAT_SAMPLE_KEYS))
        with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zrange(key, 0, 0)
            oldest = pipe.execute()
        legacy = [_text(key) for key, members in zip(keys, oldest)
                  if any(_LEGACY_UUID.fullmatch(member) for member in members)]
        if not legacy:
            return []
        return [f"{len(legacy)} of {len(keys)} sampled groups hold members in the text form of indexes "
                f"written before uuids were stored as 16 bytes (e.g. {legacy[0]}): run `manage.py "
                "rebuild_index` once to rewrite every group"]

    def is_empty(self) -> bool:
        """The first group key a SCAN meets answers it: no listing of every key."""
        return next(iter(self._scan("{*")), None) is None

    def groups(self) -> list[str]:
        """Every non-empty group: a SCAN of every primary for group keys (Redis deletes a sorted set
        when it empties). O(keys in the database): for rebuilds, verification and operators."""
        names = {group_of_key(_text(key), self.prefix) for key in self._scan("{*")}
        return sorted(names)

    def close(self) -> None:
        """A cluster's or Sentinel's client and connections are ours; a single node's pool belongs to
        django-redis's connection factory and outlives us."""
        if self.cluster and self._client is not None:
            self._client.close()
        elif self.sentinel and self._client is not None:
            self._client.connection_pool.disconnect()
        self._client = None
