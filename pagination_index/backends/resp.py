"""The RESP backend: the files index served by `manage.py serve_index`, read and written through redis-py
(docs/backends-resp.md).

Every web host and the stream consumer talk to the one server that owns the files, as they would to a
Redis: a key is a group's name, a member its text (a comment's PK), a score the sort key as integer
microseconds. Reads are the Redis backend's own (ZREVRANGE, ZCARD, ZCOUNT and ZREVRANGEBYSCORE in
MULTI/EXEC), through django-redis's pooled connections; so are the error funnel (redis-py's errors
are IndexUnavailable) and the fail-fast wrapper every backend gets. Writes are one MULTI/EXEC per
batch: ZREM, the server's ZREMIFSCORE for the stream's conditional removes, ZADD; the server stages
them in the group's log (durable before the reply) and commits them into the group's file by the
files backend's policy, or at once on ZCOMMIT (commit(), commit_index). replace() streams the new
entries with ZLOAD on one connection and publishes them with ZREPLACE.
"""
from __future__ import annotations

from typing import Iterable

import redis

from django.core.exceptions import ImproperlyConfigured

from pagination_index.backends.base import Entry, NetWriteIndex, Removal, batched, chunked
from pagination_index.backends.redis import CHUNK, RedisIndex, sort_key_score


class RespIndex(RedisIndex):
    """OPTIONS: LOCATION (redis:// or rediss:// URL of serve_index), PASSWORD (its requirepass),
    django-redis's connection options (SOCKET_CONNECT_TIMEOUT, SOCKET_TIMEOUT, CONNECTION_POOL_KWARGS),
    and WRITE_TIMEOUT: the socket timeout of writes, commits and listings of every group, which wait
    on the server's disk (a batch over thousands of groups, a commit of millions of entries), where a
    read must fail fast."""

    error_label = "resp index"
    write_ahead_log = True
    encode = staticmethod(str.encode)
    decode = staticmethod(bytes.decode)

    # serve_index has no replicas to WAIT for and keeps no fences: the consumer's lease epochs are not
    # checked here (one serve_index owns the files; a paused consumer is fenced only by its lease).
    fenced = NetWriteIndex.fenced

    def __init__(self, options=None):
        NetWriteIndex.__init__(self, options)
        if not self.options.get("LOCATION"):
            raise ImproperlyConfigured("RespIndex: OPTIONS['LOCATION'] must be serve_index's URL (PAGINATION_INDEX_RESP_URL)")
        self.prefix = ""
        self.cluster = False
        self.sentinel = False
        # One server owns the files and has no replicas to WAIT for.
        self.wait_replicas, self.wait_timeout = 0, 0.0
        self._client = None
        self._writer = None

    @property
    def writer(self):
        """A client whose socket timeout is WRITE_TIMEOUT, with a pool of its own (django-redis keeps one
        pool per URL, whatever the timeout)."""
        if self._writer is None:
            options = self.options
            self._writer = redis.Redis.from_url(
                options["LOCATION"], password=options.get("PASSWORD") or None,
                socket_connect_timeout=options.get("SOCKET_CONNECT_TIMEOUT"),
                socket_timeout=float(options.get("WRITE_TIMEOUT", 60)), **options.get("CONNECTION_POOL_KWARGS", {}))
        return self._writer

    def key(self, group: str) -> str:
        return group

    # --- writes -------------------------------------------------------------------------------
    def apply_net(self, adds: dict[str, list[Entry]], removes: dict[str, list[Removal]]) -> None:
        """The whole batch in one MULTI/EXEC: one append to each group's log, one sync, on the server."""
        scored = {group: {member: sort_key_score(sort_key) for member, sort_key in entries}
                  for group, entries in adds.items() if entries}
        removes = {group: removals for group, removals in removes.items() if removals}
        if not scored and not removes:
            return
        with self.writer.pipeline(transaction=True) as pipe:
            for group in sorted(set(scored) | set(removes)):
                removals = removes.get(group, [])
                always = [member for member, sort_key in removals if sort_key is None]
                for chunk in chunked(always, CHUNK):
                    pipe.zrem(group, *chunk)
                matching = [arg for member, sort_key in removals if sort_key is not None
                            for arg in (sort_key_score(sort_key), member)]
                for chunk in chunked(matching, 2 * CHUNK):
                    pipe.execute_command("ZREMIFSCORE", group, *chunk)
                for chunk in chunked(list(scored.get(group, {}).items()), CHUNK):
                    pipe.zadd(group, dict(chunk))
            pipe.execute()

    def replace(self, group: str, entries: Iterable[Entry]) -> None:
        """ZLOAD the entries CHUNK at a time on one connection (a pipeline would take any of the pool's),
        then ZREPLACE with the number of pairs sent: the server writes them to the group's next file as
        they come and publishes it whole; a load cut short by a lost connection is refused, not
        published."""
        sent = 0
        single = self.writer.client()
        try:
            for chunk in batched(entries, CHUNK):
                single.execute_command("ZLOAD", group, *(arg for member, sort_key in chunk
                                                         for arg in (sort_key_score(sort_key), member)))
                sent += len(chunk)
            single.execute_command("ZREPLACE", group, sent)
        finally:
            single.close()

    def clear(self) -> None:
        """FLUSHDB: the server holds the index and nothing else."""
        self.writer.flushdb()

    def commit(self, group: str) -> bool:
        return bool(self.writer.execute_command("ZCOMMIT", group))

    def pending_changes(self, group: str) -> int:
        return self.client.execute_command("ZPENDING", group)

    def pending_groups(self) -> list[str]:
        return [group.decode() for group in self.writer.execute_command("ZPENDING")]

    # --- reads --------------------------------------------------------------------------------
    def groups(self) -> list[str]:
        return sorted(key.decode() for key in self.writer.scan_iter(count=1000))

    def is_empty(self) -> bool:
        return next(iter(self.writer.scan_iter(count=1000)), None) is None

    def check_format(self) -> list[str]:
        """Members are the server's text: no older form to find."""
        return []

    def close(self) -> None:
        super().close()
        if self._writer is not None:
            self._writer.close()
            self._writer.connection_pool.disconnect()
        self._writer = None
