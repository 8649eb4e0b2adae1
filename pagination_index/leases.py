"""Shard leases: at most one consumer applies a shard's records at a time.

A lease is two columns of the shard's checkpoint row (owner, expiry), changed only by conditional
UPDATEs, so the database decides races. A consumer renews its leases while it works; one that dies
keeps them until they expire, then another consumer takes over from the checkpoint. Expiry is
judged by each process's clock: hosts sharing a stream need clocks closer than the lease length.
"""
from __future__ import annotations

import os
import socket
import uuid
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from pagination_index.models import ShardCheckpoint


class LeaseLost(Exception):
    """Another consumer holds this shard now: drop it and apply nothing more from it."""


def new_owner_id(prefix: str = "sync") -> str:
    return f"{prefix}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _free_or_mine(owner: str) -> Q:
    now = timezone.now()
    return Q(lease_owner=owner) | Q(lease_owner="") | Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)


def lease_acquire(*, checkpoint: ShardCheckpoint, owner: str, seconds: float) -> bool:
    """Take the shard's lease if it is free, expired or already ours; refreshes `checkpoint`."""
    taken = (
        ShardCheckpoint.objects.using(checkpoint._state.db).filter(pk=checkpoint.pk)
        .filter(_free_or_mine(owner))
        .update(lease_owner=owner, lease_expires_at=timezone.now() + timedelta(seconds=seconds))
    )
    checkpoint.refresh_from_db()
    return bool(taken)


def leases_acquire(*, stream_arn: str, shard_ids: list[str], owner: str, seconds: float, using: str) -> int:
    """lease_acquire() of many unfinished shards in one statement (a consumer's poll); the
    checkpoints read after it say which are ours."""
    return (
        ShardCheckpoint.objects.using(using).filter(stream_arn=stream_arn, shard_id__in=shard_ids, finished=False)
        .filter(_free_or_mine(owner))
        .update(lease_owner=owner, lease_expires_at=timezone.now() + timedelta(seconds=seconds))
    )


def lease_hold(*, checkpoint: ShardCheckpoint, owner: str, seconds: float) -> None:
    """Renew a lease we hold (inside a transaction this also locks the row until commit)."""
    if not leases_hold(checkpoints=[checkpoint], owner=owner, seconds=seconds, using=checkpoint._state.db):
        raise LeaseLost(f"shard {checkpoint.shard_id}: lease lost to another consumer")


def leases_hold(*, checkpoints: list[ShardCheckpoint], owner: str, seconds: float, using: str) -> int:
    """lease_hold() of many shards in one statement; how many were still ours."""
    now = timezone.now()
    return ShardCheckpoint.objects.using(using).filter(
        pk__in=[checkpoint.pk for checkpoint in checkpoints], lease_owner=owner, lease_expires_at__gt=now
    ).update(lease_expires_at=now + timedelta(seconds=seconds))


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
    checkpoints.filter(stream_arn=stream_arn).update(
        lease_owner=owner, lease_expires_at=timezone.now() + timedelta(seconds=seconds)
    )
    return list(checkpoints.filter(stream_arn=stream_arn).order_by("shard_id"))


def leases_renew(*, stream_arn: str, owner: str, seconds: float, using: str) -> int:
    return ShardCheckpoint.objects.using(using).filter(stream_arn=stream_arn, lease_owner=owner).update(
        lease_expires_at=timezone.now() + timedelta(seconds=seconds)
    )
