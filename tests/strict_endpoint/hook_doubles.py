"""Minimal implementations of the two hook interfaces (stack/strict_endpoint/hooks.py), to prove the
endpoint calls them: the stream and GSI-lag emulation themselves are issue 28's."""
from __future__ import annotations


class EchoStreams:
    """Answers ListStreams itself and rewrites LatestStreamArn; other calls go to DynamoDB Local."""

    def __init__(self, *, upstream, options):
        self.upstream, self.label = upstream, options["label"]

    async def handle(self, operation, params):
        if operation == "ListStreams":
            return 200, {"Streams": [{"StreamArn": f"arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/{self.label}",
                                      "TableName": "t", "StreamLabel": self.label}]}
        return 200, await self.upstream.call(operation, params, service="streams")

    def table_description(self, description):
        if "LatestStreamArn" in description:
            description["LatestStreamArn"] = description["LatestStreamArn"].rsplit("/", 1)[0] + "/" + self.label


class HidingGsiView:
    """Hides from GSI Queries every item written with an attribute `hide` (as record_write saw it)."""

    def __init__(self, *, upstream, options):
        self.hidden = set()

    async def adjust_query(self, params, body):
        items = [item for item in body.get("Items", []) if item["SK"]["S"] not in self.hidden]
        return {**body, "Items": items, "Count": len(items)}

    def record_write(self, table, old_item, new_item, at):
        if new_item and "hide" in new_item:
            self.hidden.add(new_item["SK"]["S"])
