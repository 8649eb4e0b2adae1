"""The two retry loops botocore has none for, written once: items a batch call left unprocessed
(batch_write, batch_get), and the project's own optimistic-concurrency retries, a read that saw a
write land underneath or a conditional write that lost a race to another writer (optimistic). Single
calls are retried by botocore's retry modes only (aws/__init__.py), never again on top.
"""
from __future__ import annotations

import contextvars
import random
import threading
import time
from dataclasses import dataclass
from typing import Iterator

from botocore.exceptions import BotoCoreError


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff with full jitter: attempt n (from 0) waits uniform(0, min(cap,
    base * 2**n)). Full jitter spreads competing clients apart fastest (AWS Architecture Blog,
    "Exponential Backoff And Jitter")."""

    base: float = 0.2
    cap: float = 20.0

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.cap, self.base * 2**attempt))

    def sleep(self, attempt: int) -> None:
        time.sleep(self.delay(attempt))


class RetryBudget:
    """The re-sends one page request may still make, shared by all of its Queries: a page that reads
    several partitions (a rating filter, their fast windows) makes at most its Queries plus
    the AWS MAX_ATTEMPTS - 1 re-sends, however many are throttled, so a throttling storm costs
    DynamoDB no more than one Query's retries per page. Partition reads run in copies of the
    request's context (comments.partitions), which hold this same object."""

    def __init__(self, retries: int):
        self._left = max(0, retries)
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self._left <= 0:
                return False
            self._left -= 1
            return True


# The page request's RetryBudget (shop.middleware sets one per request); None outside a request,
# where each call keeps its own attempts only.
page_retries: contextvars.ContextVar[RetryBudget | None] = contextvars.ContextVar("page_retries", default=None)


# A conditional write that lost a race to another writer: retried soon, the writers drift apart.
RACE = Backoff(base=0.01, cap=0.5)
RACE_ATTEMPTS = 20


class KeptConflicting(Exception):
    """Still losing races after every attempt of optimistic() (a backend's funnel reports it as
    IndexUnavailable: the group is too busy to be read or written now)."""


def optimistic(what: str, *, attempts: int = RACE_ATTEMPTS, backoff: Backoff = RACE,
               give_up: bool = True) -> Iterator[int]:
    """The attempts (0, 1, ...) of an optimistic read or write, for a loop whose body returns (or
    breaks) when it got through and `continue`s when another writer got there first:

        for _ in optimistic(f"read {group}"):
            stats = read_stats()
            pages = read_pages(stats)
            if read_stats().version != stats.version:
                continue  # a write landed in between: read again
            return pages

    A jittered pause (RACE) comes before every attempt but the first, so writers that collided drift
    apart. After the last, KeptConflicting is raised, or with give_up=False the loop just ends."""
    for attempt in range(attempts):
        if attempt:
            backoff.sleep(attempt - 1)
        yield attempt
    if give_up:
        raise KeptConflicting(f"{what}: still conflicting after {attempts} attempts")
# Items a batch call left unprocessed: DynamoDB asks for exponential backoff before sending them
# again ("If you retry the batch operation immediately, the underlying read or write requests can
# still fail due to throttling on the individual tables", BatchWriteItem / BatchGetItem reference).
UNPROCESSED = Backoff(base=0.05, cap=2.0)
UNPROCESSED_ATTEMPTS = 12


class StillUnprocessed(BotoCoreError):
    """A batch call kept leaving items unprocessed through every attempt (a BotoCoreError, so each
    caller's funnel of botocore errors reports it as the store being unavailable)."""

    fmt = "{operation}: {count} items still unprocessed after {attempts} attempts"


def batch_write(client, request_items: dict[str, list[dict]], *, attempts: int = UNPROCESSED_ATTEMPTS,
                backoff: Backoff = UNPROCESSED) -> None:
    """One BatchWriteItem (at most 25 requests in all), sending UnprocessedItems again after a backoff
    until none is left."""
    pending = {table: list(requests) for table, requests in request_items.items() if requests}
    for attempt in range(attempts):
        if not pending:
            return
        if attempt:
            backoff.sleep(attempt - 1)
        pending = client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
    if pending:
        raise StillUnprocessed(operation="BatchWriteItem", attempts=attempts,
                               count=sum(len(requests) for requests in pending.values()))


def batch_get(client, request_items: dict[str, dict], *, attempts: int = UNPROCESSED_ATTEMPTS,
              backoff: Backoff = UNPROCESSED) -> dict[str, list[dict]]:
    """One BatchGetItem (at most 100 keys in all): the items found per table, UnprocessedKeys asked
    again after a backoff until none is left."""
    found: dict[str, list[dict]] = {table: [] for table in request_items}
    pending = {table: request for table, request in request_items.items() if request.get("Keys")}
    for attempt in range(attempts):
        if not pending:
            return found
        if attempt:
            backoff.sleep(attempt - 1)
        response = client.batch_get_item(RequestItems=pending)
        for table, items in response.get("Responses", {}).items():
            found[table].extend(items)
        pending = response.get("UnprocessedKeys") or {}
    if pending:
        raise StillUnprocessed(operation="BatchGetItem", attempts=attempts,
                               count=sum(len(request["Keys"]) for request in pending.values()))
    return found
