"""The library's settings: one dict, settings.PAGINATION_INDEX, in the style of CACHES and
REST_FRAMEWORK. Every key has a default here (docs/library/configuration.md lists them), so a project
needs only what it changes; a key the library does not know is a system check error (checks.py), never
an AttributeError.

    from pagination_index.conf import index_settings
    index_settings.SYNC["LEASE_SECONDS"]

Sections (AWS, SYNC, REBUILD) are merged key by key with their defaults; SOURCES are read through
pagination_index.sources, which applies SOURCE_DEFAULTS to each. `index_settings` reads the setting
again after override_settings() changes it (tests).
"""
from __future__ import annotations

import copy
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

SETTING = "PAGINATION_INDEX"

DEFAULTS: dict[str, Any] = {
    # Where the sorted keys live: a dotted path to a BaseIndex subclass, and its own options.
    "BACKEND": "pagination_index.backends.relational.RelationalIndex",
    "OPTIONS": {},
    # The tables (or GSIs) the index mirrors, by name: see SOURCE_DEFAULTS.
    "SOURCES": {},
    # After an index call fails, request handling fails fast for this many seconds (0 disables).
    "FAIL_FAST_SECONDS": 2.0,
    # How the library's AWS clients are built (pagination_index/aws/). None: boto3's own
    # configuration (AWS_REGION / the profile's region, AWS_ENDPOINT_URL and its per-service forms, ...).
    "AWS": {
        "REGION": None,
        "ENDPOINT_URL": None,
        "CONNECT_TIMEOUT": 1.0,
        "READ_TIMEOUT": 5.0,
        "BULK_READ_TIMEOUT": 60.0,
        "MAX_ATTEMPTS": 3,
        "BACKGROUND_MAX_ATTEMPTS": 10,
        "BULK_MAX_ATTEMPTS": 20,
        "VERIFY_TLS": True,
    },
    # The stream consumer (sync_index).
    "SYNC": {
        "POLL_SECONDS": 1.0,
        "LEASE_SECONDS": 30.0,
        "WORKERS": 4,
        "BATCH_SIZE": 1000,
        "LAG_SAMPLE_SECONDS": 10.0,
        "LAG_SAMPLE_KEEP_HOURS": 6.0,
        # Before a batch's checkpoint moves, its index writes must be on this many replicas (Redis
        # WAIT; on a cluster, on the written shard's primary), else the batch is applied again later:
        # a failover to a replica that lacked them would otherwise lose entries the checkpoint says
        # were applied. 0: no wait (one Redis, or a store that replicates synchronously).
        "WAIT_REPLICAS": 0,
        # How long one batch waits for them; past it the checkpoint stays and the consumer retries.
        "WAIT_TIMEOUT_SECONDS": 1.0,
    },
    # rebuild_index / verify_index --repair: the wait between fencing groups and reading them.
    "REBUILD": {
        "SETTLE_SECONDS": 1.0,
    },
    # manage.py serve_index: the files index served over the Redis protocol (the resp backend's server).
    "SERVE": {
        # The files backend's OPTIONS of the index it serves (PATH at least; COMMIT_ENTRIES, COMMIT_SECONDS).
        "OPTIONS": {},
        "BIND": "127.0.0.1",
        "PORT": 6380,
        # requirepass: AUTH or HELLO must give it ("": none).
        "PASSWORD": "",
        "MAXCLIENTS": 10000,
        # The largest request it reads (Redis: proto-max-bulk-len).
        "MAX_REQUEST_BYTES": 8 << 20,
        # When a write's log append is synced: "always" before the reply, or "everysec" (Redis's appendfsync).
        "APPENDFSYNC": "always",
        "TLS_CERT_FILE": "",
        "TLS_KEY_FILE": "",
    },
}

# One entry of SOURCES. TABLE, GROUP_KEY and SORT_KEY are required.
SOURCE_DEFAULTS: dict[str, Any] = {
    "TABLE": None,
    # A GSI of TABLE whose partition key is GROUP_KEY and sort key SORT_KEY; None: the table itself.
    "INDEX": None,
    "GROUP_KEY": None,
    "SORT_KEY": None,
    # Single-table designs: only items whose sort key starts with this text belong to the source.
    "SORT_KEY_BEGINS_WITH": None,
    # "S" or "N" (the attributes' DynamoDB types); None: read from DescribeTable on first use.
    "GROUP_KEY_TYPE": None,
    "SORT_KEY_TYPE": None,
    # The table key attributes that tell items of one group apart (beside the sort key); None: the
    # table's key schema (DescribeTable) minus GROUP_KEY and SORT_KEY.
    "MEMBER_KEYS": None,
    # Index groups are this prefix + the group key's value; None: "<source name>:".
    "GROUP_PREFIX": None,
    # Slices within the first FAST_ITEMS items are read straight from DynamoDB, without the index.
    "FAST_ITEMS": 0,
    # Seconds the fast window and the counts are shared between requests (Django's cache), 0: never.
    "CACHE_SECONDS": 0.0,
    # The cache alias they are shared in.
    "CACHE": "default",
    # The class that reads the source (a pagination_index.sources.TableSource subclass: an extension
    # point for tables whose items need more than these settings say).
    "CLASS": "pagination_index.sources.TableSource",
}

SECTIONS = ("AWS", "SYNC", "REBUILD", "SERVE")


class IndexSettings:
    """settings.PAGINATION_INDEX with every default filled in, read once and again after a change."""

    def __init__(self):
        self._merged: dict[str, Any] | None = None

    @property
    def user(self) -> dict[str, Any]:
        value = getattr(settings, SETTING, None)
        return value if isinstance(value, dict) else {}

    def merged(self) -> dict[str, Any]:
        if self._merged is None:
            merged = copy.deepcopy(DEFAULTS)
            for key, value in self.user.items():
                if key in SECTIONS and isinstance(value, dict):
                    merged[key].update(value)
                else:
                    merged[key] = value
            self._merged = merged
        return self._merged

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in DEFAULTS:
            raise AttributeError(f"{SETTING} has no key {name!r}")
        return self.merged()[name]

    def reload(self) -> None:
        self._merged = None


index_settings = IndexSettings()


def _reload(*, setting, **kwargs) -> None:
    """override_settings(PAGINATION_INDEX=...): the backend, sources and clients made from the old
    value are dropped too (pagination_index.reset)."""
    if setting == SETTING:
        from pagination_index import reset

        index_settings.reload()
        reset()


setting_changed.connect(_reload, dispatch_uid="pagination_index.conf.reload")
