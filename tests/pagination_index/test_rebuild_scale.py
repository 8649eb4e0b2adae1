"""rebuild_index at scale: a stopped run resumes where it stopped, a throttled table is read within
the budget, and what the stream carries meanwhile is held only for the products being rebuilt."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command

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
def test_a_throttled_rebuild_slows_down_and_finishes(comments_table, strict_endpoint, settings):
    settings.PAGINATION_INDEX = index_config(aws={"BULK_MAX_ATTEMPTS": 1})  # every throttle reaches the command's own retry
    for n in range(4):
        factories.seed(f"T-{n}", 30, seed=50 + n)
    strict_endpoint.set_faults([{"kind": "ProvisionedThroughputExceededException", "rate": 0.5,
                                 "operations": ["Query", "Scan"]}], seed=3)
    err = io.StringIO()
    call_command("rebuild_index", max_rcu=50, stderr=err, stdout=io.StringIO())
    strict_endpoint.set_faults([])
    assert "throttled and retried at a lower rate" in err.getvalue()
    assert_index_equals_table(*(f"T-{n}" for n in range(4)))
