"""The source contract: the index app drives any table through a BaseSource (a declared source's
CLASS), and names none of the comments table's attributes, GSIs or ratings itself; nor does it import
anything of the shop."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest
from django.core.management import call_command

from pagination_index import Add, BaseSource, Remove, get_index, sources
from pagination_index.checks import check_backend
from pagination_index.stream import StreamConsumer
from tests.config import index_config

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

    table = "books"

    def __init__(self, name, options=None):
        super().__init__(name, options)
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

    def group_entries(self, group: str, *, budget=None) -> Iterator[tuple[str, str]]:
        entries = [(isbn, at) for isbn, (shelf, at) in self.books.items() if shelf == group]
        return iter(sorted(entries, key=lambda entry: (entry[1], entry[0]), reverse=True))

    def groups(self, *, budget=None, segments=4):
        return sorted({shelf for shelf, _ in self.books.values()})

    def has_items(self) -> bool:
        return bool(self.books)


def at(second: int) -> str:
    return f"2024-01-01T00:00:{second:02d}.000000Z"


@pytest.mark.django_db
def test_a_source_of_another_table_drives_the_stream_consumer_and_verify(settings):
    settings.PAGINATION_INDEX = index_config(SOURCES={"books": {"CLASS": f"{__name__}.BookshelfSource",
                                                                "GROUP_PREFIX": ""}})
    source = sources["books"]
    assert isinstance(source, BookshelfSource)
    source.shelve("111", "fiction", at(1))
    source.shelve("222", "fiction", at(2))
    source.shelve("333", "poetry", at(3))
    source.shelve("111", "poetry", at(4))  # moved: removed from fiction, added to poetry
    source.shelve("222", "fiction", at(2), gone=True)  # lent out

    result = StreamConsumer(index=get_index(), stream_arn=source.stream_arn(), sources=[source]).run(once=True)

    assert result.records == 5
    index = get_index()
    assert index.range("poetry", 0, 10) == [("111", at(4)), ("333", at(3))]
    assert index.count("fiction") == 0
    call_command("verify_index", "--recheck-seconds", "0", verbosity=0)  # the source's truth: no drift


def test_the_source_setting_is_checked(settings):
    settings.PAGINATION_INDEX = index_config(SOURCES={"x": {"CLASS": "pagination_index.backends.base.BaseIndex"}})
    [error] = check_backend(None)
    assert error.id == "pagination_index.E006" and "not a subclass of BaseSource" in error.msg
    settings.PAGINATION_INDEX = index_config(SOURCES={"x": {"TABLE": "t", "GROUP_KEY": "g"}})
    [error] = check_backend(None)
    assert error.id == "pagination_index.E006" and "SORT_KEY is required" in error.msg
    settings.PAGINATION_INDEX = index_config(SOURCES={})
    assert [e.id for e in check_backend(None)] == ["pagination_index.W001"]


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
# "Command output"). The others are documented for adopters (docs/library/).
PUBLIC = {"pagination_index", "pagination_index.models", "pagination_index.management", "pagination_index.aws",
          "pagination_index.aws.retries", "pagination_index.aws.errors", "pagination_index.sequence", "pagination_index.sources",
          "pagination_index.sortkeys", "pagination_index.conf", "pagination_index.admin"}


def test_comments_ops_and_shop_use_only_the_index_apps_public_api():
    for folder in ("comments", "ops", "shop"):
        for path in python_files(folder):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pagination_index"):
                    assert node.module in PUBLIC, f"{path.relative_to(ROOT)} imports {node.module}"
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        assert not alias.name.startswith("pagination_index."), path


SHOP = ("shop", "comments", "moderation", "ops", "metrics", "aws", "stack", "bench", "deploy", "tests")


def test_the_index_app_imports_nothing_of_the_project():
    """The library stands alone: no import of the shop's packages (nor of the test suite, but from
    its shipped contract suite's own tests)."""
    for path in python_files("pagination_index"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else (
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                assert name.split(".")[0] not in SHOP, f"{path.relative_to(ROOT)} imports {name}"
