"""rebuild_index at scale: a stopped run resumes where it stopped, a throttled table is read within
the budget, and what the stream carries meanwhile is held only for the products being rebuilt."""
from __future__ import annotations

import io
import time

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from pagination_index import get_index
from tests.config import index_config, source_of
from pagination_index.models import RebuildCheckpoint, RebuildFence, RebuildJournal
from tests import factories
from tests.pagination_index.streams import assert_index_equals_table

pytestmark = pytest.mark.django_db


class Stopped(Exception):
    pass


def test_a_stopped_rebuild_resumes_with_the_products_it_had_not_finished(comments_table, monkeypatch):
    for n, sku in enumerate(("R-A", "R-B", "R-C")):
        factories.seed(sku, 5 + n, seed=40 + n)
    source = source_of("R-A")
    read = source.group_entries
    asked = []

    def stop_at_b(group, **kwargs):
        asked.append(group)
        if group == "R-B":
            raise Stopped  # a crash or Ctrl-C in the middle of the run
        yield from read(group, **kwargs)

    monkeypatch.setattr(source, "group_entries", stop_at_b)
    with pytest.raises(Stopped):
        call_command("rebuild_index", verbosity=0, wave=1)
    assert list(RebuildCheckpoint.objects.values_list("unit", flat=True)) == ["R-A"]
    assert not RebuildFence.objects.exists()  # the stopped wave's fences were given back
    assert get_index().count("R-A") == 5 and get_index().count("R-B") == 0

    asked.clear()
    monkeypatch.setattr(source, "group_entries", lambda group, **kwargs: (asked.append(group), read(group, **kwargs))[1])
    call_command("rebuild_index", verbosity=0, resume=True)
    assert asked == ["R-B", "R-C"]  # R-A is not read again
    assert not RebuildCheckpoint.objects.exists() and not RebuildJournal.objects.exists()
    assert_index_equals_table("R-A", "R-B", "R-C")


@pytest.mark.usefixtures("strict_dynamodb_settings")
def test_a_throttled_rebuild_is_retried_by_botocore_and_finishes(comments_table, strict_endpoint):
    """Half the reads throttled: botocore's adaptive retry mode (the bulk client's, the only retry
    layer for single calls) retries them, and the rebuild finishes exact."""
    for n in range(4):
        factories.seed(f"T-{n}", 30, seed=50 + n)
    strict_endpoint.clear_requests()
    strict_endpoint.set_faults([{"kind": "ProvisionedThroughputExceededException", "rate": 0.5,
                                 "operations": ["Query", "Scan"]}], seed=3)
    call_command("rebuild_index", max_rcu=50, stderr=io.StringIO(), stdout=io.StringIO())
    strict_endpoint.set_faults([])
    retried = [entry for entry in strict_endpoint.requests() if (entry["attempt"] or 1) > 1]
    assert retried  # throttled reads were sent again, by botocore
    assert_index_equals_table(*(f"T-{n}" for n in range(4)))


@pytest.mark.usefixtures("strict_dynamodb_settings")
def test_a_rebuild_throttled_past_its_attempts_fails_with_a_clear_error_and_resumes(comments_table, strict_endpoint,
                                                                                   settings):
    settings.PAGINATION_INDEX = index_config(aws={"BULK_MAX_ATTEMPTS": 1})
    factories.seed("T-0", 30, seed=50)
    strict_endpoint.set_faults([{"kind": "ProvisionedThroughputExceededException", "rate": 1.0,
                                 "operations": ["Query", "Scan"]}])
    with pytest.raises(CommandError, match="The table could not be read: .*ProvisionedThroughputExceeded"):
        call_command("rebuild_index", stderr=io.StringIO(), stdout=io.StringIO())
    strict_endpoint.set_faults([])
    call_command("rebuild_index", resume=True, verbosity=0)
    assert_index_equals_table("T-0")


@pytest.mark.django_db(transaction=True)
def test_a_waves_fences_are_renewed_until_its_last_group_is_swapped(comments_table, dynamodb_index_options, settings):
    """Issue 42: a wave fences its groups once, then reads and swaps them one after another. Fences
    of 1 s here, and the first group's read takes 3 s: the second group's fence must still hold when
    the stream sends a write for it, so the write is journaled and replayed onto the rebuilt group
    (an expired fence let it go straight to the old group, and the swap then lost it). On the
    DynamoDB index: a relational index on SQLite would hold the database's write lock through the
    slow read, and the renewal with it."""
    settings.PAGINATION_INDEX = index_config(BACKEND=settings.PAGINATION_INDEX_BACKENDS["dynamodb"],
                                             OPTIONS=dynamodb_index_options)
    from pagination_index.backends.base import Add
    from pagination_index.fences import apply_fenced
    from pagination_index.models import StaleGroup
    from pagination_index.rebuild import Rebuild
    from pagination_index.stream import checkpoint_database
    from pagination_index.testing import sk

    for n, sku in enumerate(("F-A", "F-B")):
        factories.seed(sku, 4, seed=60 + n)
    index = get_index()
    using = checkpoint_database(index)
    source = source_of("F-A")
    read = source.group_entries

    def slow_first(group, **kwargs):
        if group == "F-A":
            time.sleep(3)  # three fence lengths
            assert RebuildFence.objects.using(using).get(group="F-B").expires_at > timezone.now()
            apply_fenced(index, [Add("F-B", "written-meanwhile", sk(10**9))], using=using)
        yield from read(group, **kwargs)

    source.group_entries = slow_first
    try:
        Rebuild(index=index, source=source, using=using, fence_seconds=1, settle_seconds=0).wave(["F-A", "F-B"])
    finally:
        del source.group_entries
    assert index.count("F-B") == 5 and index.at("F-B", 0) == ("written-meanwhile", sk(10**9))
    assert not StaleGroup.objects.using(using).exists()
    assert not RebuildFence.objects.using(using).exists()
