"""Reading several GSI partitions at once (a rating filter's groups, their fast windows)."""
from __future__ import annotations

import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from comments.table.keys import RATINGS

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def parallel(function: Callable, items: Sequence) -> list:
    """function(item) for every item, concurrently when there are several (boto3 clients are
    thread-safe; index calls stay on the caller's thread, which owns the database connection)."""
    global _pool
    if len(items) <= 1:
        return [function(item) for item in items]
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=len(RATINGS), thread_name_prefix="partition")
    # Each call runs in a copy of the caller's context, so it carries the page request's id
    # (aws.tag_request: the strict endpoint counts every attempt of one page request together).
    calls = [(contextvars.copy_context(), item) for item in items]
    return list(_pool.map(lambda call: call[0].run(function, call[1]), calls))
