"""The staff-only /ops/ page and the lag samples behind its chart, on DynamoDB Local's real stream."""
import re
from datetime import datetime, timedelta, timezone

import pytest
from django.core.management import call_command

from comments.store import item_from_comment
from comments.table.client import dynamodb
from comments.table.keys import table_name
from ops.charts import lag_chart
from pagination_index.lag import LagSampler
from pagination_index.models import LagSample, ShardCheckpoint
from tests import factories
from tests.config import index_config


def row(html, sku):
    found = re.search(rf'id="product-{sku}" data-table="(\d*)" data-index="(\d*)" data-drift="(-?\d*)"', html)
    return found.groups() if found else None


@pytest.mark.django_db
def test_anonymous_and_non_staff_are_sent_to_the_admin_login(client, django_user_model):
    response = client.get("/ops/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/?next=/ops/")
    client.force_login(django_user_model.objects.create_user("shopper", password="x"))
    assert client.get("/ops/").status_code == 302


@pytest.mark.django_db
def test_staff_see_counts_drift_checkpoints_and_lag(admin_client, comments_table):
    factories.product("OPS-A")
    factories.product("OPS-B")
    a = factories.seed("OPS-A", 45, seed=1)
    factories.seed("OPS-B", 12, seed=2)
    call_command("sync_index", once=True, verbosity=0)
    # Drift: the table loses a comment that the index has not heard of yet.
    dynamodb().delete_item(TableName=table_name(), Key={"PK": {"S": a[0].pk}, "SK": {"S": a[0].sk}})

    response = admin_client.get("/ops/")
    assert response.status_code == 200
    html = response.content.decode()
    assert row(html, "OPS-A") == ("", "45", "")  # index counts only: no Query per product
    assert row(html, "OPS-B") == ("", "12", "")
    assert 'href="/ops/?count=OPS-A"' in html
    counted = admin_client.get("/ops/?count=OPS-A").content.decode()  # one product's exact count, on demand
    assert row(counted, "OPS-A") == ("44", "45", "1") and row(counted, "OPS-B") == ("", "12", "")
    checkpoint = ShardCheckpoint.objects.get()
    assert checkpoint.sequence_number in html and checkpoint.shard_id in html
    assert LagSample.objects.exists()  # the first batch is sampled at once, and `--once` samples at the end
    assert re.search(r"Lag: <strong>[\d.]+ s</strong>", html)
    assert '<polyline class="lag-line"' in html
    assert "database: ok" in html and "dynamodb: ok" in html

    call_command("sync_index", once=True, verbosity=0)
    assert row(admin_client.get("/ops/?count=OPS-A").content.decode(), "OPS-A") == ("44", "44", "0")


@pytest.mark.django_db
def test_ops_page_renders_when_dynamodb_is_down(admin_client, settings):
    factories.product("OPS-C")
    factories.product("OPS-D")
    settings.OPS_PRODUCTS_PER_PAGE = 1
    settings.PAGINATION_INDEX = index_config(aws={"ENDPOINT_URL": "http://127.0.0.1:9"})
    response = admin_client.get("/ops/?count=OPS-C")
    assert response.status_code == 200
    html = response.content.decode()
    assert row(html, "OPS-C") == ("", "0", "")
    assert "DynamoDB: " in html and "dynamodb: failed" in html
    assert row(html, "OPS-D") is None and "Page 1 of 2 (2 products)" in html
    assert row(admin_client.get("/ops/?page=2").content.decode(), "OPS-D") == ("", "0", "")
    assert admin_client.get("/ops/?page=3").status_code == 404
    assert admin_client.get("/ops/?page=x").status_code == 404


@pytest.mark.django_db
def test_lag_is_the_age_of_records_when_applied(comments_table):
    comment = factories.make_comments("LAG-1", 1, seed=3)[0]
    dynamodb().put_item(TableName=table_name(), Item=item_from_comment(comment))
    call_command("sync_index", once=True, verbosity=0)
    samples = list(LagSample.objects.order_by("at"))
    # DynamoDB Local's record times are coarse (seen here: rounded down to the minute), so the lag of a
    # record just written is under a minute or two; once caught up, the next sample says 0.
    assert 0 < samples[0].lag_seconds < 120
    assert samples[-1].lag_seconds == 0
    assert ShardCheckpoint.objects.get().last_record_at is not None


@pytest.mark.django_db
def test_sampler_writes_at_most_once_per_interval_and_prunes(settings):
    old = LagSample.objects.create(at=datetime.now(timezone.utc) - timedelta(hours=7), lag_seconds=1)
    sampler = LagSampler(every=3600, keep_hours=6)
    sampler.note(2.0)
    sampler.note(5.0)
    first = sampler.flush()
    assert first.lag_seconds == 5.0
    sampler.note(1.0)
    assert sampler.flush() is None  # not due yet
    assert sampler.flush(force=True).lag_seconds == 1.0
    assert sampler.flush(force=True) is None  # nothing noted since
    assert not LagSample.objects.filter(pk=old.pk).exists()


def test_chart_scales_and_breaks_at_gaps():
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    end = start + timedelta(hours=1)
    samples = [(start + timedelta(minutes=m), lag) for m, lag in [(0, 0.0), (1, 3.0), (2, 1.0), (30, 0.5)]]
    chart = lag_chart(samples, start=start, end=end, gap=timedelta(minutes=2))
    assert chart.y_max == 5
    assert len(chart.lines) == 2  # the 28-minute gap breaks the line
    first = [tuple(map(float, point.split(","))) for point in chart.lines[0].split()]
    assert first[0] == (chart.left, chart.bottom)
    assert first[1][1] < first[2][1] < first[0][1]  # higher lag is drawn higher up
    assert len(chart.lines[1].split()) == 2  # a lone sample still draws a short segment
    assert lag_chart([], start=start, end=end, gap=timedelta(minutes=1)).lines == []
