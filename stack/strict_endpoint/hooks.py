"""The two seams where the stream and GSI-lag emulation (issue 28: `streams.py`, `gsi_lag.py` in this
package) plug into the endpoint. Nothing here emulates anything: with neither configured, DynamoDB
Streams calls go to DynamoDB Local and GSI answers are DynamoDB Local's.

Configure them in the start-up config as {"streams": {"class": "dotted.path", "options": {...}},
"gsi_view": {...}}; the endpoint builds each once as `cls(upstream=Upstream, options=dict)` and keeps
it as app["streams"] / app["gsi_view"]. `Upstream.call(operation, params, service="dynamodb"|"streams")`
reaches DynamoDB Local directly (unmetered, unlogged)."""
from __future__ import annotations

import importlib
from typing import Protocol


class StreamsService(Protocol):
    async def handle(self, operation: str, params: dict) -> tuple[int, dict]:
        """Answer one DynamoDB Streams request (`DynamoDBStreams_20120810.<operation>`, already
        authenticated, authorized and logged): (HTTP status, JSON body). An error body is in DynamoDB's
        shape, e.g. (400, {"__type": "com.amazonaws.dynamodb.v20120810#LimitExceededException",
        "message": "..."})."""

    def table_description(self, description: dict) -> None:
        """Rewrite a TableDescription in place (DescribeTable, CreateTable, UpdateTable answers), e.g.
        its LatestStreamArn/LatestStreamLabel, so clients follow the emulated stream."""


class GsiView(Protocol):
    async def adjust_query(self, params: dict, response_body: dict) -> dict:
        """The answer to a Query with IndexName as the client should see it, given DynamoDB Local's
        (e.g. without items written less than L seconds ago, with items deleted less than L seconds
        ago)."""

    def record_write(self, table: str, old_item: dict | None, new_item: dict | None, at: float) -> None:
        """Called for every item a successful write changed (old and new images, None when absent),
        in the order the endpoint saw them, `at` being the endpoint's clock."""


def build(spec: dict | None, upstream):
    """The object a {"class": ..., "options": ...} spec names, or None."""
    if not spec:
        return None
    module, _, name = spec["class"].rpartition(".")
    return getattr(importlib.import_module(module), name)(upstream=upstream, options=spec.get("options", {}))
