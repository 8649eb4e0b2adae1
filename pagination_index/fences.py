"""Rebuilding a group while the stream keeps flowing: fences and their journal.

A rebuild fences the groups it is about to refill (a RebuildFence row each, in the checkpoint
database), waits a moment, reads the table, swaps each group in and replays what the stream sent
for it meanwhile. Every stream consumer, sync_index and the Lambda handler alike, applies its ops
through `apply_fenced()`: ops for a fenced group are journaled, every other op is applied as usual,
so only the groups being rebuilt right now wait, and only for their own rebuild.

Why nothing is lost: a record applied before its group's fence was opened concerns a write the
table read (made after the fence and the settle wait) already sees; a record applied after goes to
the journal and is replayed on the rebuilt group, in stream order (ops are idempotent, so a write
both read and replayed is harmless). A record whose consumer checked for fences just before the
fence opened may still reach the index directly during the settle wait: that too is a write made
before the read. The settle wait also covers the GSI's own propagation delay behind the table.

The last replay and the fence's removal happen in one transaction that first locks the fence rows
(an UPDATE), as does a consumer before it journals: a consumer cannot journal into a fence that is
being closed.
"""
from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from datetime import timedelta
from typing import Iterable

from django.db import DatabaseError, connections, transaction
from django.db.models import F
from django.utils import timezone

from pagination_index.backends.base import Add, BaseIndex, Op, Remove
from pagination_index.models import RebuildFence, RebuildJournal

logger = logging.getLogger(__name__)

REPLAY_CHUNK = 1000


def _lock(groups: Iterable[str], using: str):
    """Lock the fence rows of `groups` for this transaction: SELECT ... FOR UPDATE in name order on
    PostgreSQL (every locker takes rows in the same order, so two cannot deadlock), then an UPDATE,
    which takes SQLite's write lock (where FOR UPDATE does nothing)."""
    fences = RebuildFence.objects.using(using).filter(group__in=list(groups))
    list(fences.select_for_update().order_by("group").values_list("pk", flat=True))
    fences.update(owner=F("owner"))
    return fences


def _op(row: RebuildJournal) -> Op:
    if row.kind == "+":
        return Add(row.group, row.member, row.sort_key)
    return Remove(row.group, row.member, row.sort_key or None)


def _journal(ops: list[Op], using: str) -> None:
    RebuildJournal.objects.using(using).bulk_create(
        RebuildJournal(group=op.group, kind="+" if isinstance(op, Add) else "-", member=op.member,
                       sort_key=op.sort_key or "")
        for op in ops
    )


def _replay(index: BaseIndex, groups: list[str], using: str) -> int:
    """Apply the journaled ops of `groups` in order and delete them; returns how many."""
    replayed = 0
    while True:
        rows = list(RebuildJournal.objects.using(using).filter(group__in=groups).order_by("id")[:REPLAY_CHUNK])
        if not rows:
            return replayed
        index.apply([_op(row) for row in rows])
        RebuildJournal.objects.using(using).filter(id__in=[row.id for row in rows]).delete()
        replayed += len(rows)


def apply_fenced(index: BaseIndex, ops: list[Op], *, using: str) -> None:
    """Apply a consumer's ops, journaling those of fenced groups (the stream's apply seam)."""
    fences = RebuildFence.objects.using(using)
    if not fences.exists():  # the usual case: one indexed read a batch
        index.apply(ops)
        return
    groups = {op.group for op in ops}
    with transaction.atomic(using=using):
        found = dict(_lock(groups, using).values_list("group", "expires_at"))
        now = timezone.now()
        expired = [group for group, expires_at in found.items() if expires_at < now]
        if expired:  # their rebuild died: what it journaled goes in now, and the groups are free again
            _replay(index, expired, using)
            fences.filter(group__in=expired).delete()
        held = set(found) - set(expired)
        _journal([op for op in ops if op.group in held], using)
        passed = [op for op in ops if op.group not in held]
        if passed:
            index.apply(passed)


class Fences:
    """The fences one rebuild process holds: opened per wave of groups, renewed in the
    background, closed group by group after each swap."""

    def __init__(self, *, owner: str, using: str, seconds: float):
        self.owner, self.using, self.seconds = owner, using, seconds

    def open(self, groups: Iterable[str]) -> None:
        now = timezone.now()
        for group in groups:
            RebuildFence.objects.using(self.using).update_or_create(
                group=group, defaults={"owner": self.owner, "opened_at": now,
                                       "expires_at": now + timedelta(seconds=self.seconds)})

    def close(self, index: BaseIndex, groups: list[str]) -> list[str]:
        """Replay the groups' journal onto the rebuilt groups and drop their fences. Returns the
        groups whose fence was no longer ours (it expired and a consumer drained it): those may
        have lost writes to the swap and need another rebuild."""
        _replay(index, groups, self.using)  # the bulk of it, without holding the fences locked
        with transaction.atomic(using=self.using):
            mine = set(_lock(groups, self.using).filter(owner=self.owner).values_list("group", flat=True))
            _replay(index, sorted(mine), self.using)
            RebuildFence.objects.using(self.using).filter(group__in=mine, owner=self.owner).delete()
        return sorted(set(groups) - mine)

    @contextmanager
    def renewed(self):
        """Keep this process's fences from expiring while the block runs (a wave: its groups are
        read and swapped one after another, so the last ones wait far longer than one fence lasts).
        Each block has a keeper of its own: waves of several workers run at once."""
        done = threading.Event()

        def keep():
            try:
                while not done.wait(self.seconds / 3):
                    try:
                        RebuildFence.objects.using(self.using).filter(owner=self.owner).update(
                            expires_at=timezone.now() + timedelta(seconds=self.seconds))
                    except DatabaseError as exc:  # a locked SQLite, a dropped connection: try again
                        # next time; a fence that expires meanwhile is found by close()
                        logger.warning("could not renew rebuild fences (%s); trying again in %.0f s",
                                       exc, self.seconds / 3)
                        connections[self.using].close()
            finally:
                connections[self.using].close()

        keeper = threading.Thread(target=keep, name="rebuild-fences", daemon=True)
        keeper.start()
        try:
            yield self
        finally:
            done.set()
            keeper.join()
