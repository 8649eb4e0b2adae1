"""The admin's stream checkpoint, stale-group and dead-letter pages: staff only, listed and searchable, read-only."""
from datetime import datetime, timezone

import pytest
from django.urls import reverse

from pagination_index.models import GivenUpRecord, ShardCheckpoint, StaleGroup
from tests.config import index_config

pytestmark = pytest.mark.django_db

AT = datetime(2026, 3, 5, 13, 4, 5, tzinfo=timezone.utc)


@pytest.fixture
def checkpoint():
    return ShardCheckpoint.objects.create(
        stream_arn="arn:aws:dynamodb:local:000000000000:table/comments/stream/2026", shard_id="shardId-0001-abc",
        parent_shard_id="shardId-0000-xyz", sequence_number="4200000000000000000017", lease_owner="web-1:4242",
        lease_expires_at=AT, last_record_at=AT, lag_seconds=1.5)


@pytest.fixture
def stale():
    return StaleGroup.objects.create(group="KETTLE-2000/5", reason="TrimmedDataAccessException", detected_at=AT)


@pytest.fixture
def given_up():
    return GivenUpRecord.objects.create(
        stream_arn="arn:aws:dynamodb:local:000000000000:table/comments/stream/2026", shard_id="shardId-0001-abc",
        sequence_number="4200000000000000000099", event_name="INSERT", record={"eventName": "INSERT"},
        groups=["KETTLE-2000"], error="InvalidIndexWrite: refused", via="sync_index", given_up_at=AT)


PAGES = [("shardcheckpoint", "checkpoint", "shardId-0001-abc"), ("stalegroup", "stale", "KETTLE-2000/5"),
         ("givenuprecord", "given_up", "4200000000000000000099")]


@pytest.mark.parametrize("model,fixture,shown", PAGES)
def test_a_superuser_sees_the_list_and_can_search_it(admin_client, request, model, fixture, shown):
    request.getfixturevalue(fixture)
    url = reverse(f"admin:pagination_index_{model}_changelist")
    page = admin_client.get(url)
    assert page.status_code == 200 and shown in page.content.decode()
    assert shown in admin_client.get(url, {"q": shown[:8]}).content.decode()
    assert shown not in admin_client.get(url, {"q": "no-such-thing"}).content.decode()


def test_the_checkpoint_list_shows_the_lease_and_lag(admin_client, checkpoint):
    html = admin_client.get(reverse("admin:pagination_index_shardcheckpoint_changelist")).content.decode()
    for shown in ("shardId-0000-xyz", "4200000000000000000017", "web-1:4242", "1.5"):
        assert shown in html


@pytest.mark.parametrize("model,fixture,shown", PAGES)
def test_nobody_can_add_change_or_delete(admin_client, request, model, fixture, shown):
    row = request.getfixturevalue(fixture)
    before = {field.name: getattr(row, field.name) for field in row._meta.fields}
    assert admin_client.get(reverse(f"admin:pagination_index_{model}_add")).status_code == 403
    assert admin_client.post(reverse(f"admin:pagination_index_{model}_add"), {}).status_code == 403
    detail = admin_client.get(reverse(f"admin:pagination_index_{model}_change", args=[row.pk]))
    assert detail.status_code == 200 and shown in detail.content.decode()
    assert 'name="_save"' not in detail.content.decode()  # the detail page is a view, not a form
    assert admin_client.post(reverse(f"admin:pagination_index_{model}_change", args=[row.pk]),
                             {"reason": "edited", "sequence_number": "1"}).status_code == 403
    assert admin_client.post(reverse(f"admin:pagination_index_{model}_delete", args=[row.pk]),
                             {"post": "yes"}).status_code == 403
    changelist = reverse(f"admin:pagination_index_{model}_changelist")
    assert admin_client.post(changelist, {"action": "delete_selected", "_selected_action": [row.pk],
                                          "post": "yes"}).status_code in {200, 302}
    row.refresh_from_db()
    assert {field.name: getattr(row, field.name) for field in row._meta.fields} == before


@pytest.mark.parametrize("model", ["shardcheckpoint", "stalegroup", "givenuprecord"])
def test_visitors_are_sent_to_the_login(client, model):
    response = client.get(reverse(f"admin:pagination_index_{model}_changelist"))
    assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))


@pytest.mark.django_db(databases="__all__")
def test_checkpoints_are_read_where_the_consumer_writes_them(admin_client, settings, postgres_database):
    """On the relational backend in a database of its own, checkpoints live in that database."""
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["relational"],
                                 "OPTIONS": {"DATABASE": postgres_database}})
    ShardCheckpoint.objects.using(postgres_database).create(stream_arn="arn:pg", shard_id="shardId-in-postgres")
    ShardCheckpoint.objects.create(stream_arn="arn:default", shard_id="shardId-in-default")
    html = admin_client.get(reverse("admin:pagination_index_shardcheckpoint_changelist")).content.decode()
    assert "shardId-in-postgres" in html and "shardId-in-default" not in html
