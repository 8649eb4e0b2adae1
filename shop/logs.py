"""Log formatters: one line per event, its fields as JSON (LOG_FORMAT=json) or as key=value pairs.

Callers pass an event's fields with `extra={"fields": {...}}`; the message stays a short event name
("request", "sync batch"), so the same call reads well in either format. Every line logged while a
request is served carries its id (`request_id`), put there by RequestIdFilter from the contextvar that
shop.middleware.RequestLogMiddleware sets.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

from pagination_index.aws import request_tag

# The id of the request this thread is serving; None outside a request (commands, sync_index, start-up).
# It is the pagination index's request tag too, so every attempt of a page's AWS calls is named by it
# at an emulator (the strict endpoint's request log).
current_request_id = request_tag


class RequestIdFilter(logging.Filter):
    """Stamps each record with `request_id`: the current request's, or None outside one."""

    def filter(self, record):
        if getattr(record, "request_id", None) is None:
            record.request_id = current_request_id.get()
        return True


def _fields(record: logging.LogRecord) -> dict:
    """The event's fields, with the request id first when the record was logged during a request."""
    fields = getattr(record, "fields", None)
    fields = fields if isinstance(fields, dict) else {}
    request_id = getattr(record, "request_id", None)
    if request_id is None or "request_id" in fields:
        return fields
    return {"request_id": request_id, **fields}


def _plain(value) -> str:
    text = "" if value is None else str(value)
    if not text or any(ch.isspace() or ch in '"=' for ch in text):
        return json.dumps(text)
    return text


class KeyValueFormatter(logging.Formatter):
    """`2026-11-21 22:00:00,123 INFO shop.request request method=GET path=/ status=200 ...`"""

    def __init__(self, *args, **kwargs):
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record):
        line = super().format(record)
        fields = _fields(record)
        if not fields:
            return line
        head, newline, rest = line.partition("\n")  # keep a traceback after the fields
        pairs = " ".join(f"{key}={_plain(value)}" for key, value in fields.items())
        return f"{head} {pairs}{newline}{rest}"


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the event's fields, and any traceback."""

    def format(self, record):
        entry = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)
