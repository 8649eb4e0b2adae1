"""Read-only admin pages for what the stream consumer keeps: shard checkpoints, the groups marked for
rebuild after lost records and the records it gave up on (the dead-letter table). Only sync_index,
rebuild_index, verify_index --repair and repair_index_failures change them; an edit here could skip
or replay stream records, so nobody may add, change or delete."""
from django.contrib import admin

from pagination_index import get_index
from pagination_index.models import GivenUpRecord, ShardCheckpoint, StaleGroup
from pagination_index.stream import checkpoint_database


class ReadOnlyModelAdmin(admin.ModelAdmin):
    """Lists and detail pages, never a form that saves: no add, change or delete (moderation's queue
    and audit log use it too)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(ReadOnlyModelAdmin):
    """In the database the consumer writes them to (the index's own on the relational backend)."""

    def get_queryset(self, request):
        return super().get_queryset(request).using(checkpoint_database(get_index()))


@admin.register(ShardCheckpoint)
class ShardCheckpointAdmin(ReadOnlyAdmin):
    list_display = ["shard_id", "parent_shard_id", "sequence_number", "finished", "lease_owner", "lease_expires_at",
                    "last_record_at", "lag_seconds", "updated_at"]
    list_filter = ["finished"]
    search_fields = ["shard_id", "parent_shard_id", "stream_arn", "lease_owner", "sequence_number"]
    ordering = ["stream_arn", "shard_id"]


@admin.register(StaleGroup)
class StaleGroupAdmin(ReadOnlyAdmin):
    list_display = ["group", "reason", "detected_at"]
    search_fields = ["group", "reason"]
    ordering = ["-detected_at"]


@admin.register(GivenUpRecord)
class GivenUpRecordAdmin(ReadOnlyAdmin):
    list_display = ["sequence_number", "event_name", "via", "shard_id", "error", "given_up_at", "repaired_at"]
    list_filter = ["via", ("repaired_at", admin.EmptyFieldListFilter)]
    search_fields = ["sequence_number", "shard_id", "stream_arn", "error"]
    ordering = ["-given_up_at"]
