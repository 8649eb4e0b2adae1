"""The source contract: the index app drives any table through a BaseSource, and names none of the
comments table's attributes, GSIs or ratings itself."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest
from django.core.management import call_command

from pagination_index import Add, BaseSource, Remove, get_index, get_source
from pagination_index.checks import check_pagination_index_source
from pagination_index.stream import StreamConsumer

ROOT = Path(__file__).resolve().parents[2]
ARN = "arn:memory:stream/books"


class MemoryStreams:
    """The DynamoDB Streams calls StreamConsumer makes, over one in-memory shard of records."""

    def __init__(self):
        self.records: list[dict] = []

    def describe_stream(self, *, StreamArn, **kwargs):
        return {"StreamDescription": {"Shards": [{"ShardId": "shard-0", "SequenceNumberRange": {}}]}}

    def get_shard_iterator(self, *, StreamArn, ShardId, ShardIteratorType, SequenceNumber=None):
        start = int(SequenceNumber) if ShardIteratorType == "AFTER_SEQUENCE_NUMBER" else 0
        return {"ShardIterator": str(start)}

    def get_records(self, *, ShardIterator, Limit):
        start = int(ShardIterator)
        batch = self.records[start:start + Limit]
        return {"Records": batch, "NextShardIterator": str(start + len(batch))}


class BookshelfSource(BaseSource):
    """A table of books on shelves, nothing like the comments table: a record is
    {"shelf", "isbn", "shelved_at", "gone"}; a shelf is a group."""

    def __init__(self, options=None):
        super().__init__(options)
        self.streams = MemoryStreams()
        self.books: dict[str, tuple[str, str]] = {}  # isbn -> (shelf, shelved_at)

    def shelve(self, isbn: str, shelf: str, at: str, *, gone: bool = False) -> None:
        before = self.books.pop(isbn, None)
        if not gone:
            self.books[isbn] = (shelf, at)
        sequence = str(len(self.streams.records) + 1)
        self.streams.records.append({"dynamodb": {"SequenceNumber": sequence},
                                     "book": {"isbn": isbn, "shelf": shelf, "at": at, "gone": gone,
                                              "before": before}})

    def stream_arn(self) -> str:
        return ARN

    def stream_client(self):
        return self.streams

    def record_ops(self, record: dict) -> list:
        book = record["book"]
        ops = []
        if book["before"]:
            ops.append(Remove(book["before"][0], book["isbn"], book["before"][1]))
        if not book["gone"]:
            ops.append(Add(book["shelf"], book["isbn"], book["at"]))
        return ops

    def group_entries(self, group: str) -> Iterator[tuple[str, str]]:
        return iter([(isbn, at) for isbn, (shelf, at) in self.books.items() if shelf == group])

    def units(self, *, budget=None, segments=4):
        return sorted({shelf for shelf, _ in self.books.values()})

    def has_items(self) -> bool:
        return bool(self.books)


def at(second: int) -> str:
    return f"2024-01-01T00:00:{second:02d}.000000Z"


@pytest.mark.django_db
def test_a_source_of_another_table_drives_the_stream_consumer_and_verify(settings):
    settings.PAGINATION_INDEX_SOURCE = {"BACKEND": f"{__name__}.BookshelfSource"}
    source = get_source()
    assert isinstance(source, BookshelfSource)
    source.shelve("111", "fiction", at(1))
    source.shelve("222", "fiction", at(2))
    source.shelve("333", "poetry", at(3))
    source.shelve("111", "poetry", at(4))  # moved: removed from fiction, added to poetry
    source.shelve("222", "fiction", at(2), gone=True)  # lent out

    result = StreamConsumer(index=get_index(), stream_arn=source.stream_arn()).run(once=True)

    assert result.records == 5
    index = get_index()
    assert index.range("poetry", 0, 10) == [("111", at(4)), ("333", at(3))]
    assert index.count("fiction") == 0
    call_command("verify_index", "--recheck-seconds", "0", verbosity=0)  # the source's truth: no drift


def test_the_source_setting_is_checked(settings):
    settings.PAGINATION_INDEX_SOURCE = {"BACKEND": "pagination_index.backends.base.BaseIndex"}
    [error] = check_pagination_index_source(None)
    assert error.id == "pagination_index.E007" and "not a subclass of BaseSource" in error.msg
    settings.PAGINATION_INDEX_SOURCE = {}
    assert [e.id for e in check_pagination_index_source(None)] == ["pagination_index.E005"]


def python_files(folder: str) -> list[Path]:
    return [path for path in (ROOT / folder).rglob("*.py") if "migrations" not in path.parts]


def test_the_index_app_names_nothing_of_the_comments_table():
    for path in python_files("pagination_index"):
        text = path.read_text()
        for name in ('"PK2"', "PK2R", "byProduct", "byRating", "range(1, 6)", "DYNAMODB", "import comments",
                     "from comments"):
            assert name not in text, f"{path.relative_to(ROOT)} names {name}"


# pagination_index.management is public for one thing: ReportingCommand, the output rule (progress on
# stderr by -v, results on stdout) that every command of the project follows (docs/reference.md,
# "Command output").
PUBLIC = {"pagination_index", "pagination_index.models", "pagination_index.management"}


def test_comments_ops_and_shop_use_only_the_index_apps_public_api():
    for folder in ("comments", "ops", "shop"):
        for path in python_files(folder):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pagination_index"):
                    assert node.module in PUBLIC, f"{path.relative_to(ROOT)} imports {node.module}"
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        assert not alias.name.startswith("pagination_index."), path
