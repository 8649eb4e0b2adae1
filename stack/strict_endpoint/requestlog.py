"""Every attempt the endpoint answered, with what botocore says about it (`amz-sdk-invocation-id`: one
id per API call, the same on each of its retries; `amz-sdk-request: attempt=N; max=M`) and the caller's
`X-Request-Tag` (one page request), so a test can count attempts per call and per page request
and see the gaps between them."""
from __future__ import annotations

import re
from collections import deque
from dataclasses import asdict, dataclass

ATTEMPT = re.compile(r"attempt=(\d+)(?:;\s*max=(\d+))?")
KEEP = 100_000  # entries kept (oldest dropped first): a few tens of MB


@dataclass
class Attempt:
    seq: int
    at: float  # epoch seconds, when the request arrived
    service: str  # "dynamodb" or "streams"
    operation: str
    key_id: str | None
    principal: str | None
    tables: list[str]
    index: str | None
    invocation_id: str | None
    attempt: int | None
    max_attempts: int | None
    request_id: str | None  # X-Request-Tag
    status: int = 0
    error: str | None = None
    fault: str | None = None  # the injected fault, if any
    duration_ms: float = 0.0
    read_units: float = 0.0
    write_units: float = 0.0


class RequestLog:
    def __init__(self, keep: int = KEEP):
        self._entries: deque[Attempt] = deque(maxlen=keep)
        self._seq = 0

    def start(self, *, at, service, operation, headers, key_id=None, principal=None, tables=(), index=None) -> Attempt:
        self._seq += 1
        attempt = max_attempts = None
        if match := ATTEMPT.search(headers.get("amz-sdk-request", "")):
            attempt = int(match[1])
            max_attempts = int(match[2]) if match[2] else None
        entry = Attempt(self._seq, at, service, operation, key_id, principal, list(tables), index,
                        headers.get("amz-sdk-invocation-id"), attempt, max_attempts, headers.get("X-Request-Tag"))
        self._entries.append(entry)
        return entry

    def entries(self, since: int = 0) -> list[dict]:
        return [asdict(entry) for entry in self._entries if entry.seq > since]

    def clear(self) -> None:
        self._entries.clear()

    def summary(self) -> dict:
        """Attempts grouped by botocore invocation and by X-Request-Tag: count, statuses, errors, and
        the gaps (ms) between one attempt's arrival and the next's."""
        def group(key) -> dict:
            groups: dict[str, list[Attempt]] = {}
            for entry in self._entries:
                if (value := getattr(entry, key)) is not None:
                    groups.setdefault(value, []).append(entry)
            return {value: {
                "attempts": len(entries),
                "operations": [entry.operation for entry in entries],
                "statuses": [entry.status for entry in entries],
                "errors": [entry.error for entry in entries],
                "invocations": len({entry.invocation_id for entry in entries}),
                "gaps_ms": [round((later.at - earlier.at) * 1000, 3) for earlier, later in zip(entries, entries[1:])],
            } for value, entries in groups.items()}

        by_invocation, by_request = group("invocation_id"), group("request_id")
        return {
            "attempts": len(self._entries),
            "by_invocation": by_invocation,
            "by_request_id": by_request,
            "max_attempts_per_invocation": max((g["attempts"] for g in by_invocation.values()), default=0),
            "max_attempts_per_request_id": max((g["attempts"] for g in by_request.values()), default=0),
            # Re-sends: a request's attempts beyond the first of each of its calls.
            "max_retries_per_request_id": max((g["attempts"] - g["invocations"] for g in by_request.values()), default=0),
            "key_ids": sorted({entry.key_id for entry in self._entries if entry.key_id}),
        }
