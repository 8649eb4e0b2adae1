"""Shard leases: at most one consumer applies a shard's records at a time.

Fencing: each lease carries an epoch, raised whenever another owner takes it. A consumer paused (or
partitioned) between renewing its lease and writing a batch could wake after another took the
shard over and write an older batch over newer ones. An index in the checkpoints' own database is
written inside the transaction that holds the lease row, so it cannot; any other index is handed
the batch's (shard, epoch) pairs (BaseIndex.fenced) and refuses a write whose epoch is older than one
it has already applied for that shard (the Redis backend: a fence per product, checked under WATCH).

A lease is two columns of the shard's checkpoint row (owner, expiry), changed only by conditional
UPDATEs, so the database decides races. A consumer renews its leases while it works; one that dies
keeps them until they expire, then another consumer takes over from the checkpoint. Expiry is
judged by one clock, the database's: every statement compares and sets expiries with the database's
now() (Django's Now()), never a host's, so consumers on hosts whose clocks disagree still take turns.
"""
from __future__ import annotations

import os
import socket
import uuid
from contextlib import contextmanager
from datetime import timedelta

from django.db import connections
from django.db.backends.signals import connection_created
from django.db.models import Case, F, Q, When
from django.db.models.functions import Now
from django.dispatch import receiver

from pagination_index.models import ShardCheckpoint


class LeaseLost(Exception):
    """Another consumer holds this shard now: drop it and apply nothing more from it."""


def new_owner_id(prefix: str = "sync") -> str:
    return f"{prefix}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _free_or_mine(owner: str) -> Q:
    return Q(lease_owner=owner) | Q(lease_owner="") | Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=Now())


def _taken_by(owner: str) -> dict:
    """The update that gives a lease to `owner`: the epoch goes up unless it is already `owner`'s."""
    return {"lease_owner": owner,
            "lease_epoch": Case(When(lease_owner=owner, then=F("lease_epoch")), default=F("lease_epoch") + 1)}


def _expiry(seconds: float):
    """The database's now() plus the lease length, computed in the statement."""
    return Now() + timedelta(seconds=seconds)


def lease_acquire(*, checkpoint: ShardCheckpoint, owner: str, seconds: float) -> bool:
    """Take the shard's lease if it is free, expired or already ours; refreshes `checkpoint`."""
    taken = (
        ShardCheckpoint.objects.using(checkpoint._state.db).filter(pk=checkpoint.pk)
        .filter(_free_or_mine(owner))
        .update(**_taken_by(owner), lease_expires_at=_expiry(seconds))
    )
    checkpoint.refresh_from_db()
    return bool(taken)


def leases_acquire(*, stream_arn: str, shard_ids: list[str], owner: str, seconds: float, using: str) -> int:
    """lease_acquire() of many unfinished shards in one statement (a consumer's poll); the
    checkpoints read after it say which are ours."""
    return (
        ShardCheckpoint.objects.using(using).filter(stream_arn=stream_arn, shard_id__in=shard_ids, finished=False)
        .filter(_free_or_mine(owner))
        .update(**_taken_by(owner), lease_expires_at=_expiry(seconds))
    )


def lease_hold(*, checkpoint: ShardCheckpoint, owner: str, seconds: float) -> None:
    """Renew a lease we hold (inside a transaction this also locks the row until commit)."""
    if not leases_hold(checkpoints=[checkpoint], owner=owner, seconds=seconds, using=checkpoint._state.db):
        raise LeaseLost(f"shard {checkpoint.shard_id}: lease lost to another consumer")


def leases_hold(*, checkpoints: list[ShardCheckpoint], owner: str, seconds: float, using: str) -> int:
    """lease_hold() of many shards in one statement; how many were still ours."""
    return ShardCheckpoint.objects.using(using).filter(
        pk__in=[checkpoint.pk for checkpoint in checkpoints], lease_owner=owner, lease_expires_at__gt=Now()
    ).update(lease_expires_at=_expiry(seconds))


def lease_release(*, stream_arn: str, owner: str, using: str) -> int:
    """Give up every lease we hold on the stream, so a standby takes over at once."""
    return ShardCheckpoint.objects.using(using).filter(stream_arn=stream_arn, lease_owner=owner).update(
        lease_owner="", lease_expires_at=None
    )


def leases_take(*, stream_arn: str, shards: list[dict], owner: str, seconds: float, using: str) -> list[ShardCheckpoint]:
    """Take every shard's lease by force (rebuild_index): consumers stop at their next batch, and
    the checkpoints stay where they are until the leases are released."""
    checkpoints = ShardCheckpoint.objects.using(using)
    for shard in shards:
        checkpoints.get_or_create(
            stream_arn=stream_arn, shard_id=shard["ShardId"],
            defaults={"parent_shard_id": shard.get("ParentShardId", "")},
        )
    checkpoints.filter(stream_arn=stream_arn).update(**_taken_by(owner), lease_expires_at=_expiry(seconds))
    return list(checkpoints.filter(stream_arn=stream_arn).order_by("shard_id"))


def leases_renew(*, stream_arn: str, owner: str, seconds: float, using: str) -> int:
    return ShardCheckpoint.objects.using(using).filter(stream_arn=stream_arn, lease_owner=owner).update(
        lease_expires_at=_expiry(seconds)
    )


# --- sessions that cannot outlive a lease -----------------------------------------------------
# A consumer renews its leases in a transaction that locks the checkpoint rows until commit. Should
# the network between it and PostgreSQL fail mid-transaction, PostgreSQL keeps the locks until it
# notices the dead connection: with the kernel's default keepalives, about two hours, during which no
# standby can take a shard. So the consumer's sessions end themselves within about half a lease.
_SESSION_LEASES: dict[str, float] = {}  # database alias -> the shortest lease a consumer on it holds
_SESSION_USERS: dict[str, int] = {}  # database alias -> consumers running on it


def session_settings(lease_seconds: float) -> dict[str, str]:
    """PostgreSQL settings of a consumer's session, derived from the lease length L:
    - idle_in_transaction_session_timeout L/2: a session partitioned inside a transaction (the
      server waits on it, idle) is ended and its row locks released, before the lease expires;
    - statement_timeout L/2: no statement (a lock wait included) holds the consumer past its lease;
    - the server's TCP keepalives (idle L/6, interval L/12, 3 probes) and tcp_user_timeout L/2: a
      peer that vanished is noticed in under L/2 even outside a transaction, data in flight or not.
    Every transaction of the consumer is a lease renewal, a batch's index writes (WAIT included) and
    its checkpoint: far shorter than L/2."""
    half_ms = max(int(lease_seconds * 500), 1000)
    return {
        "idle_in_transaction_session_timeout": str(half_ms),
        "statement_timeout": str(half_ms),
        "tcp_keepalives_idle": str(max(int(lease_seconds / 6), 1)),
        "tcp_keepalives_interval": str(max(int(lease_seconds / 12), 1)),
        "tcp_keepalives_count": "3",
        "tcp_user_timeout": str(half_ms),
    }


def _set_session(connection) -> None:
    lease = _SESSION_LEASES.get(connection.alias)
    if lease is None or connection.vendor != "postgresql":
        return
    names = session_settings(lease)
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join("set_config(%s, %s, false)" for _ in names),
                       [value for pair in names.items() for value in pair])


@receiver(connection_created, dispatch_uid="pagination_index.leases.session")
def _on_connection(sender, connection, **kwargs) -> None:
    _set_session(connection)


@contextmanager
def bound_sessions(using: str, lease_seconds: float):
    """While inside, every session on `using` (the open one, and each new one) gets session_settings():
    a stream consumer's run() wraps its loop in it for its checkpoint database. On the way out the
    settings stop applying to new sessions and this thread's session is closed, so a process that ran
    sync_index through call_command (tests, `make run`) goes on with ordinary sessions."""
    _SESSION_USERS[using] = _SESSION_USERS.get(using, 0) + 1
    _SESSION_LEASES[using] = min(lease_seconds, _SESSION_LEASES.get(using, lease_seconds))
    connection = connections[using]
    if connection.connection is not None:
        _set_session(connection)
    try:
        yield
    finally:
        _SESSION_USERS[using] -= 1
        if not _SESSION_USERS[using]:
            del _SESSION_USERS[using], _SESSION_LEASES[using]
        if connection.vendor == "postgresql" and not connection.in_atomic_block:  # (a test's transaction stays)
            connection.close()
