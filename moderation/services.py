"""Moderation's writes: reports, hide, unhide, delete, dismiss, erase. Each action on a comment changes
the table, records an audit entry, then makes the change visible everywhere (`_changed`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, Sequence

from django.db import IntegrityError, router, transaction
from django.db.models import F

from comments.caching import product_caches_forget
from moderation import table
from moderation.models import AuditEntry, ModeratedComment, Report
from moderation.purge import purge_product
from moderation.table import StoredComment
from shop.middleware import forget_cached_responses
from shop.models import Product


class NoSuchComment(Exception):
    """The comment id is not in the table."""


def _changed(sku: str) -> None:
    """The one way a moderation change reaches the pages: pages 1-10 read the GSI, which no longer
    holds the comment, once the product's windows, counts and newest keys are dropped from Django's
    cache (every process that shares it); deeper pages and counts follow the
    index through the stream; the rendered-HTML cache is keyed by what a page shows, so it has no
    stale copy; shared caches outside are asked to purge. The product's pages are dated by the change
    (Product.comments_changed_at: their Last-Modified and the sitemap's lastmod), so a client that
    revalidates with If-Modified-Since only gets the new page, not a 304."""
    # Rounded up to the next whole second: HTTP dates have seconds, and a copy served earlier in
    # this second carries this second's date, which If-Modified-Since must not match.
    changed_at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=1)
    # update(): the row's updated_at (an edit of the product) stays as it is.
    Product.objects.filter(sku=sku).update(comments_changed_at=changed_at)
    product_caches_forget(sku, product_changed=True)
    forget_cached_responses()
    purge_product(sku)


def _actor_name(actor) -> str:
    return actor.get_username() if actor is not None else "system"


def _audit(*, actor, action: str, comment: StoredComment | ModeratedComment, reason: str) -> None:
    AuditEntry.objects.create(
        actor=actor, actor_name=_actor_name(actor), action=action, reason=reason,
        comment_id=comment.pk if isinstance(comment, StoredComment) else comment.comment_id, sku=comment.sku)


def _record(comment: StoredComment) -> ModeratedComment:
    record, _ = ModeratedComment.objects.get_or_create(
        comment_id=comment.pk,
        defaults={"created_sk": comment.sk, "sku": comment.sku, "author": comment.author, "body": comment.body,
                  "state": ModeratedComment.State.HIDDEN if comment.hidden else ModeratedComment.State.SHOWN})
    return record


def shown_comment(comment_id: str) -> StoredComment | None:
    """The comment a shopper may report: in the table and not hidden."""
    comment = table.find_comment(comment_id)
    return comment if comment is not None and not comment.hidden else None


def report_create(*, comment: StoredComment, reason: str, note: str, client_hash: str,
                  earlier_hashes: Sequence[str] = ()) -> Report | None:
    """Queue a shopper's report; None when this client (its hash now, or under an earlier reporter
    key) has an open report on the comment already: one client cannot push a comment up the queue."""
    with transaction.atomic(using=router.db_for_write(Report)):
        record = _record(comment)
        mine = Report.objects.filter(comment=record, dismissed=False, client_hash__in=[client_hash, *earlier_hashes])
        if mine.exists():
            return None
        try:
            with transaction.atomic(using=router.db_for_write(Report)):  # a savepoint: a racing report wins
                report = Report.objects.create(comment=record, reason=reason, note=note, client_hash=client_hash)
        except IntegrityError:
            return None
        ModeratedComment.objects.filter(pk=record.pk).update(open_reports=F("open_reports") + 1,
                                                             last_reported_at=report.created_at)
    return report


def _stored(comment_id: str) -> StoredComment:
    comment = table.find_comment(comment_id)
    if comment is None:
        raise NoSuchComment(comment_id)
    return comment


def comment_hide(*, comment_id: str, actor, reason: str) -> bool:
    """Take a comment off every page, keeping it in the table; False if it was hidden already."""
    comment = _stored(comment_id)
    record = _record(comment)
    hidden = table.hide(comment, now=datetime.now(timezone.utc))
    if hidden:
        ModeratedComment.objects.filter(pk=record.pk).update(state=ModeratedComment.State.HIDDEN)
        _audit(actor=actor, action=AuditEntry.Action.HIDE, comment=comment, reason=reason)
        _changed(comment.sku)
    return hidden


def comment_unhide(*, comment_id: str, actor, reason: str) -> bool:
    """Show a hidden comment again, in its old place; False if it was not hidden."""
    comment = _stored(comment_id)
    record = _record(comment)
    shown = table.unhide(comment)
    if shown:
        ModeratedComment.objects.filter(pk=record.pk).update(state=ModeratedComment.State.SHOWN)
        _audit(actor=actor, action=AuditEntry.Action.UNHIDE, comment=comment, reason=reason)
        _changed(comment.sku)
    return shown


def _forget_text(comment_id: str) -> None:
    """A deleted comment's copy in the queue goes too; its reports' notes may quote it."""
    ModeratedComment.objects.filter(comment_id=comment_id).update(
        state=ModeratedComment.State.DELETED, author="", body="", open_reports=0)
    Report.objects.filter(comment__comment_id=comment_id).update(note="", dismissed=True)


def _delete(comment: StoredComment, *, actor, reason: str, action: str) -> bool:
    deleted = table.delete(comment)
    _forget_text(comment.pk)
    if deleted:
        _audit(actor=actor, action=action, comment=comment, reason=reason)
    return deleted


def comment_delete(*, comment_id: str, actor, reason: str) -> bool:
    """Delete a comment from the table (the stream takes it out of the index); False if it was gone."""
    comment = table.find_comment(comment_id)
    if comment is None:
        _forget_text(comment_id)
        return False
    deleted = _delete(comment, actor=actor, reason=reason, action=AuditEntry.Action.DELETE)
    if deleted:
        _changed(comment.sku)
    return deleted


def reports_dismiss(*, comment_id: str, actor, reason: str) -> int:
    """Close a comment's open reports (the comment stays as it is); returns how many were open."""
    record = ModeratedComment.objects.filter(comment_id=comment_id).first()
    if record is None:
        return 0
    with transaction.atomic():
        dismissed = Report.objects.filter(comment=record, dismissed=False).update(dismissed=True)
        ModeratedComment.objects.filter(pk=record.pk).update(open_reports=0)
        if dismissed:
            _audit(actor=actor, action=AuditEntry.Action.DISMISS, comment=record, reason=reason)
    return dismissed


@dataclass
class Erasure:
    """What an erasure found (and, unless a dry run, deleted)."""
    found: list[StoredComment] = field(default_factory=list)
    missing_ids: list[str] = field(default_factory=list)
    deleted: int = 0

    @property
    def skus(self) -> list[str]:
        return sorted({comment.sku for comment in self.found})


def erasure_matches(*, sku: str | None = None, author: str | None = None,
                    comment_ids: Iterable[str] = (), read_limit: int | None = None) -> Erasure:
    """The comments an erasure request names: every comment by `author` (exact name) on product `sku`,
    shown or hidden, and/or the listed ids. `read_limit`: at most that many of the product's comments
    read for the author's (table.TooManyToRead past it: a web request's bound)."""
    erasure = Erasure()
    seen = set()
    if author is not None:
        if not sku:
            raise ValueError("An erasure by author names the product (sku) too.")
        hidden_ids = ModeratedComment.objects.filter(sku=sku, state=ModeratedComment.State.HIDDEN) \
            .values_list("comment_id", flat=True)
        candidates = table.shown_comments_by_author(sku, author, read_limit=read_limit) + [
            comment for comment in map(table.find_comment, hidden_ids)
            if comment is not None and comment.hidden and comment.author == author]
        for comment in candidates:
            if comment.pk not in seen:
                seen.add(comment.pk)
                erasure.found.append(comment)
    for comment_id in comment_ids:
        if comment_id in seen:
            continue
        comment = table.find_comment(comment_id)
        if comment is None:
            erasure.missing_ids.append(comment_id)
        else:
            seen.add(comment_id)
            erasure.found.append(comment)
    return erasure


def comments_erase(*, erasure: Erasure, actor, reason: str, on_deleted: Callable[[], None] | None = None) -> Erasure:
    """Delete the comments an erasure found (erasure_matches, shown to the requester first). Each
    deletion is audited as an erasure; each product's pages are purged once, at the end."""
    try:
        for comment in erasure.found:
            erasure.deleted += _delete(comment, actor=actor, reason=reason, action=AuditEntry.Action.ERASE)
            if on_deleted:
                on_deleted()
    finally:  # what was deleted before a failure is out of the pages too
        for changed_sku in erasure.skus:
            _changed(changed_sku)
    return erasure
