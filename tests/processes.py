"""Watching processes a test started (from /proc), and the shard leases in a SQLite index database."""
from __future__ import annotations

import sqlite3
from pathlib import Path


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
    return state, int(ppid)


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))):
            parents[int(entry.name)] = stat[1]
    found, frontier = [pid], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def alive(pids: list[int]) -> list[int]:
    """Those of `pids` still running (a zombie has exited)."""
    return [pid for pid in pids if (stat := _stat(pid)) and stat[0] != "Z"]


def leases(database: Path) -> list[tuple[str, str, str | None]]:
    """(shard, lease owner, lease expiry) of every checkpoint row; none before the database is migrated."""
    if not database.exists():
        return []
    with sqlite3.connect(database) as connection:
        try:
            return connection.execute(
                "SELECT shard_id, lease_owner, lease_expires_at FROM pagination_index_shardcheckpoint").fetchall()
        except sqlite3.OperationalError:  # no such table yet
            return []
