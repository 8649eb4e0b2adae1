"""What moderation keeps in the shop's database: the comments shoppers reported (or staff acted on),
their reports, and the audit log. The comments themselves stay in DynamoDB."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from shop.models import Product

# Any product's comments can be reported and moderated: a SKU as long as the catalogue allows.
SKU_MAX_LENGTH = Product._meta.get_field("sku").max_length


class ModeratedComment(models.Model):
    """A comment that was reported or acted on: the queue's row. Author and text are copied at the
    first report so staff can search the queue; an erasure or a deletion blanks the copy."""

    class State(models.TextChoices):
        SHOWN = "shown", "shown"
        HIDDEN = "hidden", "hidden"
        DELETED = "deleted", "deleted"

    comment_id = models.CharField(max_length=64, unique=True)  # the table's PK
    created_sk = models.CharField(max_length=32)  # the table's SK: with comment_id, the item's key
    sku = models.CharField(max_length=SKU_MAX_LENGTH, db_index=True)
    author = models.CharField(max_length=200, blank=True)
    body = models.TextField(blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.SHOWN)
    open_reports = models.PositiveIntegerField(default=0, db_index=True)  # reports not yet dismissed
    last_reported_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-open_reports", "-last_reported_at"]
        indexes = [models.Index(fields=["sku", "state"])]
        permissions = [("moderate_comment", "Can hide, show again, delete and erase comments")]

    def __str__(self):
        return f"{self.sku}: {self.author or '(erased)'} ({self.comment_id[:8]})"


class Report(models.Model):
    """One shopper's report. The client's address is kept only as a keyed hash (HMAC with
    MODERATION_REPORTER_KEY): enough to see one client's many reports, not to learn the address. A
    client has at most one open report on a comment: reporting it again moves it no further up the queue."""

    class Reason(models.TextChoices):
        SPAM = "spam", "Spam or advertising"
        ABUSE = "abuse", "Abusive or hateful"
        ILLEGAL = "illegal", "Illegal content"
        PERSONAL = "personal", "Personal information"
        OFF_TOPIC = "off_topic", "Not about this product"

    comment = models.ForeignKey(ModeratedComment, on_delete=models.CASCADE, related_name="reports")
    reason = models.CharField(max_length=20, choices=Reason.choices)
    note = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    client_hash = models.CharField(max_length=64)
    dismissed = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["comment", "client_hash"], condition=models.Q(dismissed=False),
                                    name="moderation_one_open_report_per_client"),
        ]


class AuditEntry(models.Model):
    """Append-only: saved once, never changed (save() refuses an update, and the admin offers no
    change or delete)."""

    class Action(models.TextChoices):
        HIDE = "hide", "hide"
        UNHIDE = "unhide", "unhide"
        DELETE = "delete", "delete"
        DISMISS = "dismiss", "dismiss reports"
        ERASE = "erase", "erase"

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    actor_name = models.CharField(max_length=150)  # kept when the user is deleted
    action = models.CharField(max_length=10, choices=Action.choices)
    comment_id = models.CharField(max_length=64, db_index=True)
    sku = models.CharField(max_length=SKU_MAX_LENGTH)
    reason = models.CharField(max_length=500)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("The audit log is append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("The audit log is append-only.")
