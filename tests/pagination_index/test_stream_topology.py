"""sync_index on a stream that behaves like AWS's (the strict endpoint's emulation): shards that split
and roll over, empty pages, DescribeStream limits, trims and a new stream ARN."""
from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from comments.table.schema import create_tables, delete_tables
from pagination_index import get_index
from pagination_index.models import ShardCheckpoint, StaleGroup
from pagination_index.stream import Backoff, StreamConsumer
from tests import factories
from tests.pagination_index.streams import assert_index_equals_table, delete, move, stream_arn

pytestmark = [pytest.mark.usefixtures("aws_stream_settings", "comments_table"), pytest.mark.django_db]


def consumer(**kwargs) -> StreamConsumer:
    kwargs.setdefault("backoff", Backoff(base=0.05, cap=0.5))
    return StreamConsumer(index=get_index(), stream_arn=stream_arn(), **kwargs)


def wait_for(endpoint, condition, what: str) -> dict:
    """The stream's emulated status once it meets `condition` (a new table's stream appears there
    once the endpoint's pump has taken it in)."""
    deadline = time.monotonic() + 60
    while (status := endpoint.hook_status("streams").get(stream_arn())) is None or not condition(status):
        assert time.monotonic() < deadline, f"{what} not within 60 s: {status}"
        time.sleep(0.2)
    return status


def roll_over(endpoint) -> dict:
    """Roll every open shard over once (each closes, with a child), then stop roll-overs: a drain
    (`run(once=True)`) ends when no shard is left to finish, and shards rolling over faster than a
    loaded machine drains them would keep it going for ever."""
    before = endpoint.hook_status("streams")[stream_arn()]
    endpoint.configure_hook("streams", rollover_seconds=1.5)
    status = wait_for(endpoint, lambda s: s["shards"] >= before["shards"] + before["open_shards"], "a roll-over")
    endpoint.configure_hook("streams", rollover_seconds=3600)
    return status


def test_splits_rollovers_and_empty_pages_lose_and_mark_nothing(aws_stream_settings):
    endpoint = aws_stream_settings
    reader = consumer(workers=4)
    endpoint.configure_hook("streams", shards=4, empty_page_rate=0.3)
    comments = factories.seed("A", 20, seed=1) + factories.seed("B", 15, seed=2)
    roll_over(endpoint)  # the records sit in closed parents, read on through their children
    assert reader.run(once=True).records == 35
    for comment in comments[:5]:
        delete(comment)
    for comment in comments[20:23]:
        move(comment, "C")
    factories.seed("A", 6, seed=10)
    endpoint.configure_hook("streams", shards=6)
    wait_for(endpoint, lambda s: s["open_shards"] >= 6, "a split")
    status = roll_over(endpoint)
    assert status["shards"] > status["open_shards"] >= 6
    reader.run(once=True)
    assert_index_equals_table("A", "B", "C")
    assert not StaleGroup.objects.exists()
    finished = set(ShardCheckpoint.objects.filter(finished=True).values_list("shard_id", flat=True))
    assert finished and not finished & (set(reader._last_read) | reader._idle)  # a closed shard's state goes


def test_a_steady_consumer_lists_the_shards_once_in_a_while(aws_stream_settings):
    aws_stream_settings.configure_hook("streams", shards=8)
    factories.seed("A", 20, seed=3)
    stop = threading.Event()
    reader = consumer(stop_event=stop, workers=4)
    reader.run(once=True)  # listings (a call each: < 100 shards) and children asked for alone
    settled = reader.describe_calls
    assert settled <= 1 + 7

    def write_then_stop():  # the table's writes only: the consumer (and the database) stay on this thread
        time.sleep(1.5)
        factories.seed("A", 5, seed=4)
        time.sleep(2)
        stop.set()

    writer = threading.Thread(target=write_then_stop)
    writer.start()
    try:
        reader.run(once=False, poll_seconds=0.2)
    finally:
        stop.set()
        writer.join()
    assert reader.describe_calls == settled  # steady: the map is cached between refreshes (every 30-60 s)
    assert_index_equals_table("A")


def test_a_trim_is_a_loss_marked_once_in_one_row(aws_stream_settings):
    factories.seed("A", 5, seed=5)
    reader = consumer()
    assert reader.run(once=True).records == 5
    aws_stream_settings.configure_hook("streams", retention_seconds=0.5, rollover_seconds=0.3)
    factories.seed("A", 3, seed=6)  # written, then trimmed before anyone read them
    time.sleep(1.0)
    aws_stream_settings.configure_hook("streams", retention_seconds=86400, rollover_seconds=3600)
    result = reader.run(once=True)
    assert result.trimmed and all("every group needs" in loss for loss in result.trimmed)
    assert list(StaleGroup.objects.values_list("group", flat=True)) == ["*"]


def test_a_recreated_table_is_followed_and_marked_stale(aws_stream_settings):
    factories.seed("A", 5, seed=7)
    reader = consumer()
    assert reader.run(once=True).records == 5
    old = reader.stream_arn
    delete_tables()
    create_tables()
    factories.seed("B", 4, seed=8)
    result = reader.poll()
    assert reader.stream_arn == stream_arn() != old
    assert any("stream changed" in loss for loss in result.trimmed)
    assert result.records == 4
    assert list(StaleGroup.objects.values_list("group", flat=True)) == ["*"]
    StaleGroup.objects.all().delete()
    # A consumer started after the change, with only the old stream's checkpoints, says so too.
    ShardCheckpoint.objects.filter(stream_arn=reader.stream_arn).delete()
    assert any("new since the index last read" in loss for loss in consumer().run(once=True).trimmed)


def test_finished_checkpoints_are_pruned_after_48_hours(aws_stream_settings):
    arn = stream_arn()
    old = timezone.now() - timedelta(hours=49)
    ShardCheckpoint.objects.create(stream_arn=arn, shard_id="shardId-00000000000000000001-00000000", finished=True)
    ShardCheckpoint.objects.create(stream_arn=arn, shard_id="shardId-00000000000000000002-00000000", finished=True)
    ShardCheckpoint.objects.filter(shard_id__endswith="1-00000000").update(updated_at=old)
    consumer().run(once=True)
    assert set(ShardCheckpoint.objects.filter(finished=True).values_list("shard_id", flat=True)) == {
        "shardId-00000000000000000002-00000000"}


def test_pages_of_many_shards_are_applied_together(aws_stream_settings):
    aws_stream_settings.configure_hook("streams", shards=8)
    wait_for(aws_stream_settings, lambda s: s["open_shards"] >= 8, "a split")
    factories.seed("A", 40, seed=11)  # comments spread over the shards by their ids
    reader = consumer(workers=4)
    commits = []
    commit = reader._commit_batches
    reader._commit_batches = lambda batches: commits.append({b.checkpoint.shard_id for b in batches}) or commit(batches)
    reader.commit_seconds = 0.5  # pages fetched within half a second share a transaction
    assert reader.run(once=True).records == 40
    shards = set().union(*commits)
    assert len(shards) >= 4 and len(commits) < len(shards)  # not a transaction per shard
    assert_index_equals_table("A")


def test_a_following_consumer_reads_a_caught_up_shard_again_within_its_poll(aws_stream_settings):
    aws_stream_settings.configure_hook("streams", shards=2)
    factories.seed("A", 3, seed=12)
    stop = threading.Event()
    polls, applied, seen = [], [], {}
    reader = consumer(stop_event=stop, workers=2)
    reader.poll_span = 60.0  # one poll for the whole test: what it applies later, it applied on a revisit
    commit = reader._commit_batches

    def counting(batches):
        committed = commit(batches)
        applied.extend(record for batch in committed for record in batch.records)
        return committed
    reader._commit_batches = counting

    def write_when_caught_up():  # the table's writes only: the consumer (and the database) stay on this thread
        try:
            deadline = time.monotonic() + 30
            while len(applied) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            factories.seed("A", 2, seed=13)
            while len(applied) < 5 and time.monotonic() < deadline:
                time.sleep(0.05)
            seen.update(applied=len(applied), polls_ended=len(polls))
        finally:
            stop.set()

    writer = threading.Thread(target=write_when_caught_up)
    writer.start()
    try:
        reader.run(once=False, poll_seconds=0.2, on_poll=polls.append)
    finally:
        stop.set()
        writer.join()
    assert seen == {"applied": 5, "polls_ended": 0}  # applied inside the first poll, by reading the shards again
    assert_index_equals_table("A")
