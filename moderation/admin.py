"""The staff screen: the queue of reported comments (Django's admin, behind its staff login), the
moderation actions, the erasure form, and the audit log. Records are never edited here: every change
goes through moderation.services, which writes the audit entry."""
from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.template.defaultfilters import truncatechars
from django.urls import path

from comments.table.client import StoreUnavailable
from moderation import services
from moderation.models import AuditEntry, ModeratedComment, Report
from moderation.table import TooManyToRead
from pagination_index.admin import ReadOnlyModelAdmin

MODERATE_PERMISSION = "moderation.moderate_comment"


class ReasonActionForm(ActionForm):
    reason = forms.CharField(label="Reason (for the audit log)", required=False, max_length=500)


class ErasureForm(forms.Form):
    sku = forms.CharField(label="Product SKU", required=False, max_length=100)
    author = forms.CharField(label="Author name (exactly as shown)", required=False, max_length=200)
    ids = forms.CharField(label="Comment ids (one a line)", required=False, widget=forms.Textarea(attrs={"rows": 4}))
    reason = forms.CharField(label="Reason (for the audit log)", max_length=500)

    def clean(self):
        data = super().clean()
        data["id_list"] = [line.strip() for line in data.get("ids", "").splitlines() if line.strip()]
        if data.get("author") and not data.get("sku"):
            self.add_error("sku", "An erasure by author name is per product: give its SKU.")
        if not data.get("author") and not data["id_list"]:
            raise forms.ValidationError("Give an author name and a product, or comment ids.")
        return data


class ReportInline(admin.TabularInline):
    model = Report
    fields = ["created_at", "reason", "note", "dismissed", "client_hash"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


def _moderation_action(service, *, description: str, done: str):
    """An admin action that runs `service` on each selected comment with the reason typed beside the
    action menu (required: the audit log says why)."""

    @admin.action(description=description, permissions=["moderate"])
    def action(modeladmin, request, queryset):
        reason = request.POST.get("reason", "").strip()
        if not reason:
            modeladmin.message_user(request, "Give a reason: the audit log records why.", messages.ERROR)
            return
        changed = missing = 0
        for record in queryset:
            try:
                changed += bool(service(comment_id=record.comment_id, actor=request.user, reason=reason))
            except services.NoSuchComment:
                missing += 1
            except StoreUnavailable:
                modeladmin.message_user(request, "DynamoDB is not answering: nothing more was changed. "
                                                 "Try again in a minute.", messages.ERROR)
                break
        text = f"{changed} comment(s) {done}."
        if missing:
            text += f" {missing} no longer in the table."
        modeladmin.message_user(request, text, messages.SUCCESS if changed else messages.WARNING)

    action.__name__ = service.__name__
    return action


# Rows change only through the moderation services (and the audit log never): read-only screens.
@admin.register(ModeratedComment)
class ModeratedCommentAdmin(ReadOnlyModelAdmin):
    """The queue: most open reports first. Staff need the "moderate comments" permission for the
    actions; viewing needs only the view permission."""
    list_display = ["excerpt", "author", "sku", "state", "open_reports", "last_reported_at"]
    list_filter = ["state"]
    search_fields = ["sku", "author", "body", "=comment_id"]
    ordering = ["-open_reports", "-last_reported_at"]
    fields = ["comment_id", "created_sk", "sku", "author", "body", "state", "open_reports", "last_reported_at"]
    readonly_fields = fields
    inlines = [ReportInline]
    action_form = ReasonActionForm
    actions = [
        _moderation_action(services.comment_hide, description="Hide from every page", done="hidden"),
        _moderation_action(services.comment_unhide, description="Show again", done="shown again"),
        _moderation_action(services.comment_delete, description="Delete from the table", done="deleted"),
        _moderation_action(services.reports_dismiss, description="Dismiss the reports", done="cleared of reports"),
    ]

    @admin.display(description="comment")
    def excerpt(self, obj):
        return truncatechars(obj.body, 80) or "(erased)"

    def has_moderate_permission(self, request):
        return request.user.has_perm(MODERATE_PERMISSION)

    def get_urls(self):
        return [path("erase/", self.admin_site.admin_view(self.erase_view), name="moderation_erase"),
                *super().get_urls()]

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "can_erase": self.has_moderate_permission(request)}
        return super().changelist_view(request, extra_context)

    def erase_view(self, request):
        """The erasure form: the first submit lists what matches (a dry run), "Erase" deletes it."""
        if not self.has_moderate_permission(request):
            raise PermissionDenied
        form = ErasureForm(request.POST or None)
        erasure = None
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                erasure = services.erasure_matches(sku=data["sku"] or None, author=data["author"] or None,
                                                   comment_ids=data["id_list"],
                                                   read_limit=settings.MODERATION_ERASE_WEB_READ_LIMIT)
                if "erase" in request.POST and erasure.found:
                    services.comments_erase(erasure=erasure, actor=request.user, reason=data["reason"])
                    self.message_user(request, f"{erasure.deleted} comment(s) erased.", messages.SUCCESS)
                    erasure = None
            except TooManyToRead as exc:
                # The whole partition in one request would hold a worker (and the proxy's timeout) for
                # as long as a large product takes to read: the command has no such limit.
                self.message_user(request, f"{exc.sku} has more than {exc.limit:,} comments, too many to read for an "
                                           "erasure by author name within one page request: nothing was changed. Run "
                                           f"`manage.py erase_comments --product {exc.sku} --author NAME --reason TEXT` "
                                           "instead (--dry-run lists what it would erase).", messages.ERROR)
            except StoreUnavailable:
                self.message_user(request, "DynamoDB is not answering: nothing more was changed. "
                                           "Try again in a minute.", messages.ERROR)
        return TemplateResponse(request, "admin/moderation/erase.html", {
            **self.admin_site.each_context(request), "opts": self.model._meta, "title": "Erase comments",
            "form": form, "erasure": erasure})


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyModelAdmin):
    """Visible to staff with the view permission; nobody may add, change or delete an entry."""
    list_display = ["at", "actor_name", "action", "comment_id", "sku", "reason"]
    list_filter = ["action"]
    search_fields = ["=comment_id", "sku", "actor_name", "reason"]
    date_hierarchy = "at"
