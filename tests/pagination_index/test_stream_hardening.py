"""sync_index under trouble, on DynamoDB Local's real stream: throttling and network errors, lost
records, two consumers sharing a stream through leases, rebuilds during writes, verify, Lambda."""
from __future__ import annotations

import dataclasses
import io
import threading
import time
import types
from datetime import timedelta

import pytest
from botocore.exceptions import EndpointConnectionError
from django.core.management import CommandError, call_command
from django.utils import timezone

from pagination_index import get_index
from tests.config import index_config, source_of
from pagination_index.aws_lambda import handler
from pagination_index.leases import LeaseLost
from pagination_index.fences import Fences
from pagination_index.models import GivenUpRecord, RebuildFence, RebuildJournal, ShardCheckpoint, StaleGroup
from pagination_index.stream import Backoff, StreamConsumer
from tests import factories
from tests.pagination_index.streams import (
    Faults,
    assert_index_equals_table,
    delete,
    lambda_event,
    move,
    put,
    read_stream_records,
    stream_arn,
)
from tests.services import RedisServer

FAST = Backoff(base=0.01, cap=0.05)


@pytest.fixture
def faults(comments_table):
    injector = Faults()
    yield injector
    injector.close()


def consumer(**kwargs) -> StreamConsumer:
    kwargs.setdefault("backoff", FAST)
    return StreamConsumer(index=get_index(), stream_arn=stream_arn(), **kwargs)


@pytest.mark.django_db
def test_throttling_and_network_errors_are_retried(faults):
    factories.seed("A", 60, seed=11)
    faults.fail("DescribeStream", "LimitExceededException")
    faults.fail("GetShardIterator", "InternalServerError")
    faults.fail("GetRecords", "ProvisionedThroughputExceededException", "ThrottlingException",
                EndpointConnectionError(endpoint_url="http://dynamodb.invalid"))
    result = consumer(batch_size=25).run(once=True)
    assert faults.injected == 5
    assert result.records == 60
    assert_index_equals_table("A")


@pytest.mark.django_db
def test_other_errors_are_not_retried(faults):
    factories.seed("A", 3, seed=12)
    faults.fail("GetRecords", "AccessDeniedException")
    with pytest.raises(Exception, match="AccessDenied"):
        consumer().run(once=True)


@pytest.mark.django_db
def test_expired_iterator_is_reacquired_from_the_checkpoint(faults):
    comments = factories.seed("A", 80, seed=13)
    faults.fail("GetRecords", None, "ExpiredIteratorException")  # the second call finds its iterator expired
    consumer(batch_size=30).run(once=True)
    for comment in comments[:5]:
        delete(comment)
    consumer(batch_size=30).run(once=True)
    assert_index_equals_table("A")


@pytest.mark.django_db
def test_trimmed_records_mark_groups_until_rebuilt(faults):
    factories.seed("A", 20, seed=14)
    factories.seed("B", 5, seed=15)
    call_command("sync_index", once=True, verbosity=0)
    factories.seed("A", 3, seed=16)
    faults.fail("GetShardIterator", "TrimmedDataAccessException")
    err = io.StringIO()
    with pytest.raises(CommandError, match="stream loss"):
        call_command("sync_index", once=True, verbosity=0, stderr=err)
    assert "STREAM RECORDS LOST" in err.getvalue() and "every group needs `rebuild_index`" in err.getvalue()
    # One write, whatever the index holds: "*" stands for every group.
    assert set(StaleGroup.objects.values_list("group", flat=True)) == {"*"}
    with pytest.raises(CommandError, match="lost stream records"):
        call_command("verify_index", verbosity=0, stderr=io.StringIO(), recheck_seconds=0)
    call_command("rebuild_index", group=["A"], verbosity=0)  # not enough: any group may have lost records
    assert set(StaleGroup.objects.values_list("group", flat=True)) == {"*"}
    call_command("rebuild_index", verbosity=0)
    assert not StaleGroup.objects.exists()
    call_command("verify_index", verbosity=0, recheck_seconds=0)


@pytest.mark.django_db
def test_a_shard_that_expired_unread_is_a_loss(comments_table):
    factories.seed("A", 5, seed=17)
    ShardCheckpoint.objects.create(stream_arn=stream_arn(), shard_id="shardId-00000001700000000000-0000gone",
                                  sequence_number="0" * 20 + "1")
    result = consumer().run(once=True)
    assert any("0000gone" in loss for loss in result.trimmed)
    assert StaleGroup.objects.filter(group="*").exists()
    assert ShardCheckpoint.objects.get(shard_id__endswith="0000gone").finished
    assert not consumer().run(once=True).trimmed  # reported once, not on every poll


@pytest.mark.django_db
def test_one_consumer_per_shard_and_takeover_after_expiry(comments_table):
    comments = factories.seed("A", 90, seed=18)
    first = consumer(batch_size=30, lease_seconds=60)
    second = consumer(batch_size=30, lease_seconds=60)
    applied = []  # (owner, first sequence number) of every committed batch

    def recording(consumer_):
        commit = consumer_._commit_batches

        def wrapped(batches):
            committed = commit(batches)  # returns once committed
            applied.extend((consumer_.owner, batch.records[0]["dynamodb"]["SequenceNumber"])
                           for batch in committed if batch.records)
            return committed
        consumer_._commit_batches = wrapped

    recording(first)
    recording(second)
    assert first.poll().records == 90
    for comment in comments[:10]:
        delete(comment)
    assert second.poll().records == 0  # the first still holds the shard
    ShardCheckpoint.objects.update(lease_expires_at=timezone.now() - timedelta(seconds=1))  # the first dies
    assert second.poll().records == 10
    checkpoint = ShardCheckpoint.objects.get()
    assert checkpoint.lease_owner == second.owner
    factories.seed("A", 4, seed=19)
    with pytest.raises(LeaseLost):  # the first wakes up: it may apply nothing more
        first._commit(checkpoint, read_stream_records(stream_arn())[-4:], finished=False)
    assert second.poll().records == 4
    assert_index_equals_table("A")
    sequence_numbers = [sequence for _, sequence in applied]
    assert len(sequence_numbers) == len(set(sequence_numbers))  # no batch applied twice
    assert {owner for owner, _ in applied} == {first.owner, second.owner}


@pytest.mark.django_db
def test_clean_exit_releases_leases_at_once(comments_table):
    factories.seed("A", 5, seed=20)
    call_command("sync_index", once=True, verbosity=0)
    assert ShardCheckpoint.objects.get().lease_owner == ""


@pytest.mark.django_db
def test_status_shows_checkpoint_lease_and_lag(comments_table):
    factories.seed("A", 5, seed=21)
    call_command("sync_index", once=True, verbosity=0)
    checkpoint = ShardCheckpoint.objects.get()
    assert checkpoint.lag_seconds is not None and checkpoint.last_record_at
    out = io.StringIO()
    call_command("sync_index", status=True, stdout=out)
    text = out.getvalue()
    assert checkpoint.shard_id in text and checkpoint.sequence_number in text and "lag" in text
    assert f"{checkpoint.lag_seconds:.1f}s" in text


@pytest.mark.django_db
def test_writes_during_a_rebuild_reach_the_index(comments_table, monkeypatch):
    """The rebuild reads a product, then (before it swaps the groups in) more writes land and a
    consumer runs: the product's writes are held back and replayed after the swap, and every
    other product's are applied at once (no global pause)."""
    a = factories.seed("A", 50, seed=22)
    call_command("sync_index", once=True, verbosity=0)
    source = source_of("A")
    read = source.group_entries
    late = factories.make_comments("A", 7, seed=23)

    def read_then_write(group, **kwargs):
        found = list(read(group, **kwargs))
        if group == "A":
            for comment in late:
                put(comment)
            for comment in a[:4]:
                delete(comment)
            move(a[4], "B")
            assert consumer().run(once=True).records == 12  # the stream flows...
            assert get_index().count("A") == 50  # ...A's ops are held back: it is being rebuilt
            assert get_index().count("B") == 1  # ...B's are applied at once
            assert RebuildJournal.objects.filter(group="A").count() == 12
        return iter(found)  # read whole before the swap begins

    monkeypatch.setattr(source, "group_entries", read_then_write)
    call_command("rebuild_index", group=["A"], verbosity=0, settle_seconds=0)
    monkeypatch.undo()  # the table's truth below is read plainly
    assert not RebuildJournal.objects.exists() and not RebuildFence.objects.exists()
    assert get_index().count("A") == 52  # the table as read, then the held-back writes replayed
    assert_index_equals_table("A", "B")
    assert consumer().run(once=True).records == 0


@pytest.mark.django_db
def test_a_fence_left_by_a_dead_rebuild_is_drained_once_expired(comments_table):
    factories.seed("A", 5, seed=29)
    call_command("sync_index", once=True, verbosity=0)
    fences = Fences(owner="rebuild:dead", using="default", seconds=60)
    fences.open(["A"])
    late = factories.make_comments("A", 3, seed=30)
    for comment in late:
        put(comment)
    assert consumer().run(once=True).records == 3
    assert get_index().count("A") == 5 and RebuildJournal.objects.count() == 3
    RebuildFence.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    put(factories.make_comments("A", 1, seed=31)[0])
    assert consumer().run(once=True).records == 1
    assert not RebuildFence.objects.exists() and not RebuildJournal.objects.exists()
    assert_index_equals_table("A")


@pytest.mark.django_db
def test_rebuild_on_a_stream_never_read_notes_its_end(comments_table):
    a = factories.seed("A", 30, seed=24)
    call_command("rebuild_index", verbosity=0)
    checkpoint = ShardCheckpoint.objects.get()
    assert checkpoint.sequence_number  # the end of the shard: older records need no replay
    delete(a[0])
    assert consumer().run(once=True).records == 1
    assert_index_equals_table("A")


@pytest.mark.django_db
def test_verify_finds_each_kind_of_drift_and_repairs(comments_table):
    a = factories.seed("A", 40, seed=25)
    factories.seed("B", 10, seed=26)
    call_command("sync_index", once=True, verbosity=0)
    call_command("verify_index", verbosity=0, recheck_seconds=0)
    index = get_index()
    index.remove_many("A", [a[0].pk, a[1].pk])  # missing
    index.add_many("A", [("ghost", "2001-01-01T00:00:00.000000Z")])  # extra
    index.add_many("A", [(a[10].pk, a[20].sk)])  # wrong sort key: missing + extra
    out = io.StringIO()
    with pytest.raises(CommandError, match="drift in 1 of 12 group"):
        call_command("verify_index", stdout=out, recheck_seconds=0)
    assert "A: table 40, index 39, missing 3, extra 2, misordered 0" in out.getvalue()
    with pytest.raises(CommandError):
        call_command("verify_index", group=["A"], sample=None, stdout=io.StringIO(), recheck_seconds=0)
    call_command("verify_index", group=["B"], verbosity=0, recheck_seconds=0)
    call_command("verify_index", repair=True, stdout=io.StringIO(), recheck_seconds=0)
    assert_index_equals_table("A", "B")
    call_command("verify_index", sample=1, verbosity=0, recheck_seconds=0)


@pytest.mark.django_db
def test_verify_reports_misorder_and_backend_integrity(comments_table, monkeypatch):
    factories.seed("A", 6, seed=27)
    call_command("sync_index", once=True, verbosity=0)
    index = get_index()
    table = index.range("A", 0, 10)
    monkeypatch.setattr(type(index), "range", lambda self, group, start, stop: [table[1], table[0], *table[2:]][start:stop])
    monkeypatch.setattr(type(index), "check_integrity", lambda self, group: ["block 3 counts 5, holds 4"], raising=False)
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("verify_index", stdout=out, recheck_seconds=0)
    assert "misordered 2" in out.getvalue() and "block 3 counts 5, holds 4" in out.getvalue()


@pytest.mark.django_db(transaction=True)  # the handler manages its connection, as in Lambda
def test_lambda_handler_applies_real_stream_records(comments_table):
    a = factories.seed("A", 30, seed=28)
    for comment in a[:5]:
        delete(comment)
    move(a[5], "B")
    delete(a[6])
    put(dataclasses.replace(a[6], sk="2031-01-01T00:00:00.000000Z"))  # an SK change: delete + put
    records = read_stream_records(stream_arn())
    event = lambda_event(records, stream_arn())
    assert isinstance(event["Records"][0]["dynamodb"]["ApproximateCreationDateTime"], int)
    for start in range(0, len(event["Records"]), 10):  # batches of 10, as a mapping with BatchSize=10
        assert handler({"Records": event["Records"][start:start + 10]}, None) == {"batchItemFailures": []}
    assert_index_equals_table("A", "B")


@pytest.mark.django_db(transaction=True)  # the handler manages its connection, as in Lambda
def test_lambda_holds_back_a_fenced_groups_records_for_the_rebuild(comments_table):
    factories.seed("A", 8, seed=32)
    factories.seed("B", 3, seed=33)
    fences = Fences(owner="rebuild:test", using="default", seconds=60)
    fences.open(["A"])  # A is being rebuilt
    event = lambda_event(read_stream_records(stream_arn()), stream_arn())
    assert handler(event, None) == {"batchItemFailures": []}
    assert get_index().count("A") == 0 and get_index().count("B") == 3
    assert RebuildJournal.objects.filter(group="A").count() == 8
    get_index().replace("A", [])  # the rebuild's swap (of a table read before these writes)
    assert fences.close(get_index(), ["A"]) == []  # its journal replayed, the fence dropped
    assert_index_equals_table("A", "B")


@pytest.mark.django_db(transaction=True)  # the handler manages its connection, as in Lambda
def test_lambda_handler_reports_the_first_failure_and_everything_after(comments_table):
    factories.seed("A", 6, seed=29)
    event = lambda_event(read_stream_records(stream_arn()), stream_arn())
    broken = event["Records"][3]
    # A record we cannot apply: its image lacks the member key. (One without the sort key is no item of
    # the source, as a sparse GSI has none: it makes no op.)
    del broken["dynamodb"]["NewImage"]["PK"]
    response = handler(event, None)
    expected = [record["dynamodb"]["SequenceNumber"] for record in event["Records"][3:]]
    assert response == {"batchItemFailures": [{"itemIdentifier": number} for number in expected]}
    assert get_index().count("A") == 3  # the records before the failure were applied


@pytest.mark.django_db(transaction=True)
def test_a_following_consumer_waits_out_an_index_outage(comments_table, settings, tmp_path):
    """Redis (holding the index) killed while comments are written: the consumer keeps polling
    instead of dying with records unapplied, and catches up once Redis is back."""
    server = RedisServer(tmp_path, durable=True).start()
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["redis"], "OPTIONS": dict(
        settings.PAGINATION_INDEX_REDIS, LOCATION=f"redis://127.0.0.1:{server.port}/1")})
    try:
        factories.seed("A", 30, seed=41)
        worker = consumer()
        assert worker.run(once=True).records == 30
        server.kill()
        late = factories.seed("A", 20, seed=42)
        follower = threading.Thread(target=worker.run, kwargs={"once": False, "poll_seconds": 0.1})
        follower.start()
        time.sleep(1.5)  # polls meet the dead index meanwhile
        assert follower.is_alive()
        server.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and get_index().count("A") < 50:
            time.sleep(0.2)
        worker.stop_event.set()
        follower.join(10)
        assert not follower.is_alive()
        assert_index_equals_table("A")
        assert {c.pk for c in late} <= {member for member, _ in get_index().range("A", 0, 100)}
    finally:
        server.kill()


@pytest.mark.django_db(transaction=True)
def test_lambda_handler_finishes_the_dynamodb_re_mark(dynamodb_index_options, settings):
    """A deep insert past MAX_SHIFT marks its group; the next invocation's deferred work re-marks it."""
    from pagination_index.testing import sk

    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["dynamodb"],
                                 "OPTIONS": dict(dynamodb_index_options, MAX_SHIFT=1)})
    index = get_index()
    index.replace("g", [(f"m{n:02d}", sk(n * 2)) for n in range(30)])
    index.add_many("g", [("x", sk(1))])
    assert index.marked_groups() == ["g"]
    assert handler({"Records": []}, None) == {"batchItemFailures": []}
    assert index.marked_groups() == [] and index.check_integrity("g") == []
    assert index.count("g") == 31 and index.range("g", 29, 31) == [("x", sk(1)), ("m00", sk(0))]


def _a_record_the_dynamodb_index_refuses(settings, dynamodb_index_options) -> str:
    """Comments of A and B, and among A's one whose member DynamoDB refuses in the index (a 1,500-byte
    id makes the member item's sort key pass DynamoDB's 1,024 bytes: a ValidationException, every
    time). Returns that comment's product's stale-group reason prefix."""
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["dynamodb"],
                                               "OPTIONS": dynamodb_index_options})
    a = factories.seed("A", 3, seed=70)
    put(dataclasses.replace(a[0], pk="p" * 1500, sk="2030-01-01T00:00:00.000000Z"))
    factories.seed("B", 2, seed=71)
    return "stream record "


@pytest.mark.django_db(transaction=True)
def test_sync_index_gives_up_on_a_record_it_cannot_apply_durably(comments_table, dynamodb_index_options, settings):
    """Issue 42 / 45 L6: a record that can never be applied used to be waited out as an outage (the
    consumer stopped at it until the stream trimmed it, 24 h). Now it is given up on, visibly and
    durably: its groups are marked stale (verify_index fails, the stale-groups gauge counts them,
    rebuild_index repairs them), and everything else is applied."""
    from pagination_index import signals

    reason = _a_record_the_dynamodb_index_refuses(settings, dynamodb_index_options)
    given_up = []
    signals.record_given_up.connect(lambda sender, **kw: given_up.append((sender, kw["groups"])), weak=False,
                                    dispatch_uid="test.given_up")
    try:
        result = consumer().run(once=True)
    finally:
        signals.record_given_up.disconnect(dispatch_uid="test.given_up")
    assert result.records == 6
    assert get_index().count("A") == 3 and get_index().count("B") == 2
    marks = dict(StaleGroup.objects.values_list("group", "reason"))
    assert "A" in marks and marks["A"].startswith(reason) and "could not be applied" in marks["A"]
    assert given_up and given_up[0][0] == "sync_index" and "A" in given_up[0][1]
    assert not consumer().run(once=True).records  # checkpointed past it: not met again
    with pytest.raises(CommandError, match="lost stream records"):
        call_command("verify_index", verbosity=0, stderr=io.StringIO(), recheck_seconds=0)
    _assert_dead_lettered("sync_index")
    assert GivenUpRecord.objects.get().shard_id in set(ShardCheckpoint.objects.values_list("shard_id", flat=True))


def _assert_dead_lettered(via: str) -> GivenUpRecord:
    """Issue 45: the record given up on is in the dead-letter table, whole (its 1,500-byte id), not yet repaired."""
    row = GivenUpRecord.objects.get()
    assert row.via == via and row.stream_arn == stream_arn() and row.event_name == "INSERT"
    assert row.record["dynamodb"]["SequenceNumber"] == row.sequence_number
    assert row.record["dynamodb"]["NewImage"]["PK"]["S"].endswith("p" * 1500)
    assert "A" in row.groups and "refused a member of group 'A' as invalid" in row.error
    assert row.repaired_at is None
    return row


@pytest.mark.django_db(transaction=True)
def test_repair_index_failures_rebuilds_what_was_given_up_on(comments_table, dynamodb_index_options, settings):
    """Issue 45: the dead-letter table is repairable. `repair_index_failures --given-up` lists the record;
    once its cause is fixed (here the comment is deleted), `--rebuild` rebuilds its groups, clears their
    marks and marks the record repaired, so the next run finds nothing."""
    _a_record_the_dynamodb_index_refuses(settings, dynamodb_index_options)
    consumer().run(once=True)
    row = GivenUpRecord.objects.get()
    out = io.StringIO()
    call_command("repair_index_failures", given_up=True, stdout=out, stderr=io.StringIO())
    assert row.sequence_number in out.getvalue() and "1 given-up record(s)" in out.getvalue()
    assert GivenUpRecord.objects.get().repaired_at is None  # listed, not repaired
    delete(types.SimpleNamespace(pk="p" * 1500, sk="2030-01-01T00:00:00.000000Z"))  # the cause, fixed
    call_command("repair_index_failures", given_up=True, rebuild=True, stdout=io.StringIO(), stderr=io.StringIO())
    assert GivenUpRecord.objects.get().repaired_at is not None
    assert not StaleGroup.objects.exists()
    assert_index_equals_table("A", "B")
    call_command("verify_index", verbosity=0, stdout=io.StringIO(), stderr=io.StringIO(), recheck_seconds=0)
    out = io.StringIO()
    call_command("repair_index_failures", given_up=True, rebuild=True, stdout=out, stderr=io.StringIO())
    assert "0 given-up record(s)" in out.getvalue()


def test_repair_index_failures_needs_something_to_repair():
    with pytest.raises(CommandError, match="FOLDER of on-failure messages, --queue URL or --given-up"):
        call_command("repair_index_failures", stdout=io.StringIO(), stderr=io.StringIO())


@pytest.mark.django_db(transaction=True)  # the handler manages its connection, as in Lambda
def test_lambda_gives_up_on_a_record_it_cannot_apply_durably(comments_table, dynamodb_index_options, settings):
    """The same record through the Lambda handler: not left to Lambda's retries, age limit and on-failure
    destination (where it used to expire unnoticed), but marked stale in the database; the batch goes on."""
    _a_record_the_dynamodb_index_refuses(settings, dynamodb_index_options)
    event = lambda_event(read_stream_records(stream_arn()), stream_arn())
    assert handler(event, None) == {"batchItemFailures": []}
    assert get_index().count("A") == 3 and get_index().count("B") == 2
    assert "A" in set(StaleGroup.objects.values_list("group", flat=True))
    _assert_dead_lettered("lambda")
    assert handler(event, None) == {"batchItemFailures": []}  # the same batch again: still one row
    assert GivenUpRecord.objects.count() == 1
