"""The commands' output rule (docs/reference.md, "Command output"): progress and notes on stderr at
-v 1, the result on stdout, nothing but errors at -v 0. Real commands on DynamoDB Local."""
from __future__ import annotations

import io
import time

import pytest
from django.core.management import call_command
from django.core.management.base import OutputWrapper

from pagination_index import get_index
from tests.config import source_of
from pagination_index.management import stream_arn
from pagination_index.progress import Progress
from pagination_index.stream import stream_paused
from tests import factories

pytestmark = pytest.mark.django_db


def run(*args, **options) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def test_rebuild_index_progress_on_stderr_and_quiet_at_v0(comments_table):
    factories.seed("OUT-1", 45, seed=51)
    assert run("rebuild_index", group=["OUT-1"], verbosity=0) == ("", "")
    assert run("rebuild_index", verbosity=0) == ("", "")

    out, err = run("rebuild_index", group=["OUT-1"])
    assert "rebuilding (items): done, 45 (" in err
    assert out.startswith("rebuilt 6 groups (90 entries)")  # the product's group and its five rating groups
    assert "done" not in out and "rebuilt" not in err
    out, err = run("rebuild_index")
    assert "rebuilding (items): done, 100.0% 45/~45" in err
    assert out.count("\n") == 1 and out.startswith("rebuilt 6 groups")


def test_seed_demo_progress_on_stderr_and_quiet_at_v0(comments_table):
    arguments = {"big": 30, "products": 2, "comments": 5, "threads": 1}
    assert run("seed_demo", verbosity=0, **arguments) == ("", "")
    out, err = run("seed_demo", **arguments)
    assert err.startswith("seeding comments: done, 100.0% 35/35") and err.count("\n") == 1
    assert out == "2 products, 35 comments written\n"
    out, err = run("seed_demo", if_empty=True, **arguments)
    assert (out, err) == ("comments table already has data: products updated, no comments written\n", "")


def test_seed_demo_can_fill_the_index_from_what_it_writes(comments_table):
    """--index: the index written from the seeding (no read back), and verify_index finds it equal to
    the table."""
    out, _ = run("seed_demo", big=40, products=3, comments=9, threads=2, index=True)
    assert out == "3 products, 49 comments written, 98 index entries in 10 groups\n"  # 40 + 9 + none; 2 groups each
    assert get_index().count("KETTLE-2000") == 40
    out, _ = run("verify_index", recheck_seconds=0)
    assert out.startswith("index matches the table")


def test_sync_and_verify_index_progress_on_stderr_and_quiet_at_v0(comments_table):
    factories.seed("OUT-2", 12, seed=52)
    assert run("sync_index", once=True, verbosity=0) == ("", "")
    factories.seed("OUT-2", 3, seed=53)
    out, err = run("sync_index", once=True)
    assert err.startswith("applied ") and "records" in err
    assert out == "caught up: 3 records applied\n"

    assert run("verify_index", verbosity=0, recheck_seconds=0) == ("", "")
    out, err = run("verify_index", recheck_seconds=0)
    assert "verifying (items): done, 100.0% 15/~15" in err
    assert out.startswith("index matches the table: 6 group(s), 30 table entries")
    out, _ = run("verify_index", recheck_seconds=0, verbosity=2)  # detail: every group's line
    assert "OUT-2: table 15, index 15, missing 0, extra 0, misordered 0" in out


def test_sync_index_warns_on_stderr_about_shards_leased_elsewhere(comments_table):
    factories.seed("OUT-3", 4, seed=54)
    with stream_paused(index=get_index(), stream_arn=stream_arn(source_of("OUT-1")), lease_seconds=60):  # as rebuild_index
        out, err = run("sync_index", once=True)
        assert run("sync_index", once=True, verbosity=0) == ("", "")
    assert "leased by another consumer were left to it" in err
    assert out == "caught up: 0 records applied\n"


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_redraws_one_line_on_a_terminal_through_a_command_stream():
    """Django's OutputWrapper ends every write with a newline and colours stderr as an error; a bar
    redrawn with \\r needs neither."""
    terminal = Terminal()
    progress = Progress(OutputWrapper(terminal), 3, "copying")
    for _ in range(3):
        progress.advance()
    progress.finish()
    text = terminal.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n") and text.startswith("\rcopying [")
    assert "\x1b[" not in text
    assert text.rstrip("\n").rsplit("\r", 1)[1].startswith("copying [" + "#" * 30 + "] 100.0% 3/3")


def test_an_estimated_total_is_shown_as_one_and_passing_it_is_said_not_counted_past_100_percent():
    """rebuild_index and verify_index size their bar by DynamoDB's ItemCount, which AWS refreshes
    every few hours: a table that grew meanwhile runs past it."""
    terminal = Terminal()
    progress = Progress(OutputWrapper(terminal), 4, "rebuilding (items)", estimated=True)
    time.sleep(0.11)  # a terminal's bar is redrawn at most every 0.1 s until the end
    progress.advance(2)
    assert "50.0% 2/~4" in terminal.getvalue()
    progress.advance(4)
    progress.finish()
    last = terminal.getvalue().rstrip("\n").rsplit("\r", 1)[1]
    assert last.startswith("rebuilding (items) [" + "#" * 30 + "] 6, past the estimate of ~4 (")
    assert "%" not in last and "ETA" not in last
