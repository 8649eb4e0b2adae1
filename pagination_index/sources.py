"""The source contract: the table an index mirrors, as the index needs to see it.

The index app names no attribute, key or GSI of any table. A source, chosen by dotted path in
settings.PAGINATION_INDEX_SOURCE like the backend, turns the table's stream records into index ops
and reads the table's truth for rebuild and verify. The comments table's source lives in the
comments app (comments.table.source).

Modelled on BaseIndex: the essentials raise NotImplementedError, the rest have correct defaults.
"""
from __future__ import annotations

from typing import Iterable, Iterator

from django.core.exceptions import ImproperlyConfigured

from pagination_index.backends.base import Entry, Op, newest_first


class InvalidSourceError(ImproperlyConfigured):
    pass


class NoStream(Exception):
    """The table has no stream to follow (its message says how to give it one)."""


class SourceUnavailable(Exception):
    """The table could not be read (a source raises a subclass of its own); commands report it
    as an error, not a traceback."""


class BaseSource:
    def __init__(self, options: dict | None = None):
        self.options = dict(options or {})

    # --- the stream ---------------------------------------------------------------------------
    def stream_arn(self) -> str:
        """The ARN of the table's current stream; raises NoStream if it has none."""
        raise NotImplementedError("subclasses of BaseSource must provide a stream_arn() method")

    def stream_client(self):
        """A boto3 `dynamodbstreams` client (or one with the same calls) for the stream."""
        raise NotImplementedError("subclasses of BaseSource must provide a stream_client() method")

    def record_ops(self, record: dict) -> list[Op]:
        """The index ops one stream record makes (none for a change no group cares about)."""
        raise NotImplementedError("subclasses of BaseSource must provide a record_ops() method")

    def records_ops(self, records: Iterable[dict]) -> list[Op]:
        return [op for record in records for op in self.record_ops(record)]

    # --- the table's truth --------------------------------------------------------------------
    def group_entries(self, group: str) -> Iterator[Entry]:
        """Every (member, sort_key) of one group, in any order."""
        raise NotImplementedError("subclasses of BaseSource must provide a group_entries() method")

    def related_entries(self, group: str) -> dict[str, list[Entry]]:
        """A group and every group derived from the same items (a product and its rating groups),
        empty ones included, so a rebuild of them empties what the table no longer has."""
        return {group: list(self.group_entries(group))}

    def group_count(self, group: str) -> int:
        """How many items the table holds for one group."""
        return sum(1 for _ in self.group_entries(group))

    # --- the table's truth, unit by unit (rebuild_index, verify_index) ------------------------
    # A unit is what one read of the table gives whole: a product, with its own group and the
    # groups derived from it. Commands walk units in order, so their memory holds the units'
    # names and a read's worth of one group, never a group or the table.
    def units(self, *, budget=None, segments: int = 4) -> Iterable[str]:
        """Every unit the table holds, in ascending order."""
        raise NotImplementedError("subclasses of BaseSource must provide a units() method")

    def unit_of(self, group: str) -> str:
        """The unit a group belongs to."""
        return group

    def unit_groups(self, unit: str) -> list[str]:
        """Every group of a unit, empty ones included (a rebuild empties what the table lost)."""
        return [unit]

    def unit_entries(self, unit: str, *, budget=None) -> Iterator[tuple[str, Iterator[Entry]]]:
        """(group, its entries newest first) for each group of unit_groups(unit); each group's
        entries must be consumed before the next group is asked for. `budget` is a
        pagination_index.capacity.ReadBudget the reads spend from."""
        related = self.related_entries(unit)
        for group in self.unit_groups(unit):
            yield group, iter(newest_first(related.get(group, [])))

    def has_items(self) -> bool:
        raise NotImplementedError("subclasses of BaseSource must provide a has_items() method")

    def approximate_item_count(self) -> int:
        """A cheap estimate of the table's size, for progress bars; 0 when unknown."""
        return 0

    def close(self) -> None:
        """Release connections; called when the handler is reset."""
