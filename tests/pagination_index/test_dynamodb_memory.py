"""The DynamoDB index's whole-group work in flat memory (issue 42, defect 4): a rewrite, an integrity
check and a generation drop walk the group a page of items at a time, and a Lambda's maintain()
never rewrites a group: it lists it for repair."""
import tracemalloc

import pytest

from pagination_index.aws_lambda import handler
from pagination_index.backends.dynamodb import DynamoDBIndex
from pagination_index.testing import sk
from pagination_index import get_index
from tests.config import index_config


def newest_first_stream(count: int, prefix: str = "m"):
    """A rebuild's stream: entries newest first, made as they are read (never a list)."""
    return ((f"{prefix}{n:07d}", sk(n)) for n in range(count - 1, -1, -1))


def peak_bytes(work) -> int:
    """The peak of Python's allocations while work() runs, above what was allocated before."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_rewrite_integrity_check_and_drop_stay_flat_as_the_group_grows(dynamodb_index_options):
    """Rebuilding a group from a stream, checking it and repairing it (both generations walked and
    dropped) peaks at about the same memory for 8,000 entries as for 2,000 (pages of 3 entries:
    over 500 page items, more than one Query page, in both). Holding the group (the old _rewrite, 2 KB or so an
    entry) makes the larger peak about four times the smaller."""
    index = DynamoDBIndex(dynamodb_index_options)

    def whole_group_work(count):
        group = f"g{count}"
        index.replace(group, newest_first_stream(count))
        assert index.check_integrity(group) == []
        index.repair_group(group)  # a copy of the group: walked, written anew, the old generation dropped
        assert index.check_integrity(group) == []
        assert index.count(group) == count and index.at(group, count - 1) == ("m0000000", sk(0))

    whole_group_work(10)  # botocore loads its models (paginators, waiters) on first use: not the group's
    small, large = peak_bytes(lambda: whole_group_work(2_000)), peak_bytes(lambda: whole_group_work(8_000))
    print(f"peak {small} B at 2,000 entries, {large} B at 8,000")
    assert large < 1.5 * small, (small, large)
    index.replace("g8000", [])  # the drop walks every item too
    assert index.count("g8000") == 0 and index._query("g8000") == []


def test_replace_from_a_stream_keeps_a_repeated_members_last_sort_key(dynamodb_index_options):
    """The contract allows any order and repeated members; the spool notices both."""
    index = DynamoDBIndex(dynamodb_index_options)
    stream = iter([("b", sk(9)), ("a", sk(8)), ("b", sk(2)), ("c", sk(1))])  # ordered, but "b" twice
    index.replace("g", stream)
    assert index.range("g", 0, 10) == [("a", sk(8)), ("b", sk(2)), ("c", sk(1))]
    assert index.check_integrity("g") == []
    index.replace("g", iter([("x", sk(1)), ("y", sk(5)), ("x", sk(3))]))  # out of order
    assert index.range("g", 0, 10) == [("y", sk(5)), ("x", sk(3))] and index.check_integrity("g") == []


def test_replace_with_the_same_entries_writes_nothing(dynamodb_index_options):
    index = DynamoDBIndex(dynamodb_index_options)
    index.replace("g", newest_first_stream(50))
    version = index._stats("g").version
    index.replace("g", newest_first_stream(50))
    assert index._stats("g").version == version


@pytest.mark.django_db(transaction=True)
def test_lambda_maintain_lists_a_group_for_repair_instead_of_rewriting_it(dynamodb_index_options, settings, caplog):
    """Deletes past MAX_SHIFT leave marked page items too thin for a re-mark's window: only a
    rewrite makes them exact. Inside a Lambda invocation the re-mark lists the group for repair
    (no BatchWriteItem, no whole-group read) and says so; sync_index's maintain() then rewrites it."""
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["dynamodb"],
                                 "OPTIONS": dict(dynamodb_index_options, MAX_SHIFT=1)})
    index = get_index()
    model = {f"m{n:02d}": sk(n) for n in range(30)}  # 10 page items of 3
    index.replace("g", list(model.items()))
    for n in range(9):  # empty the oldest page items but the newest few
        index.remove_many("g", [f"m{n:02d}"])
        del model[f"m{n:02d}"]
    assert index.marked_groups() == ["g"]
    operations = []
    index.writer.meta.events.register("provide-client-params.dynamodb.*",
                                      lambda model, **_: operations.append(model.name))
    assert handler({"Records": []}, None) == {"batchItemFailures": []}
    assert "BatchWriteItem" not in operations and "TransactWriteItems" not in operations
    assert index.repair_groups() == ["g"]
    assert "listed for repair" in caplog.text
    assert any("listed for repair" in problem for problem in index.check_integrity("g"))
    assert index.range("g", 0, 100) == sorted(((m, k) for m, k in model.items()), key=lambda e: e[1], reverse=True)
    assert handler({"Records": []}, None) == {"batchItemFailures": []}  # the next invocation leaves it too
    assert index.repair_groups() == ["g"]
    while index.maintain():  # sync_index's maintain(): the rewrite, in flat memory
        pass
    assert index.repair_groups() == [] and index.marked_groups() == [] and index.check_integrity("g") == []
    assert index.range("g", 0, 100) == sorted(((m, k) for m, k in model.items()), key=lambda e: e[1], reverse=True)


class Operations:
    """The DynamoDB operations an index's two clients send."""

    def __init__(self, index):
        self.names = []
        for client in (index.client, index.writer):
            client.meta.events.register("provide-client-params.dynamodb.*", self.note)

    def note(self, model, **_):
        self.names.append(model.name)


def test_groups_and_is_empty_read_the_registry_not_a_scan(dynamodb_index_options):
    """compose's init asks is_empty() (rebuild_index --if-empty) on every start, operators groups():
    a Query of the registry partition, never a Scan of every item of the index."""
    index = DynamoDBIndex(dynamodb_index_options)
    operations = Operations(index)
    assert index.is_empty() and index.groups() == []
    index.add_many("a", [("m1", sk(1))])
    index.replace("b", [("m2", sk(2)), ("m3", sk(3))])
    index.apply_net({"c": [("m4", sk(4))]}, {})
    assert not index.is_empty() and index.groups() == ["a", "b", "c"]
    index.remove_many("a", ["m1"])
    index.replace("b", [])
    assert index.groups() == ["c"]
    index.remove_many("c", ["m4"])
    assert index.is_empty() and index.groups() == []
    assert "Scan" not in operations.names


def test_create_table_lists_the_groups_of_a_table_made_before_the_registry(dynamodb_index_options):
    index = DynamoDBIndex(dynamodb_index_options)
    index.replace("a", [("m1", sk(1))])
    index.add_many("b", [("m2", sk(2))])
    for item in index._query("\x00groups"):  # as a table written by an earlier release holds it
        index.writer.delete_item(TableName=index.table, Key={"g": item["g"], "p": item["p"]})
    assert index.groups() == ["a", "b"] and not index.is_empty()  # a Scan until the registry is complete
    index.create_table()  # `create_tables`, run by every deploy and compose's init
    operations = Operations(index)
    assert index.groups() == ["a", "b"] and not index.is_empty() and "Scan" not in operations.names
    assert index.check_integrity("a") == []


def test_the_index_writer_retries_in_standard_mode(dynamodb_index_options):
    """The adaptive mode's client-side rate limiter is one per client: a throttle on one hot product's
    stats item would slow every group's writes through the shared writer."""
    index = DynamoDBIndex(dynamodb_index_options)
    assert index.writer.meta.config.retries["mode"] == "standard"
    index.add_many("g", [("m", sk(1))])
    assert index.count("g") == 1
