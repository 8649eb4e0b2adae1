"""DynamoDB item reads without botocore's walk of the response model.

DynamoDB's wire JSON already is the parsed form of an item ({"S": "..."}, {"N": "..."} maps): the
walk was a quarter of a 21-item Query's CPU (bench/notes/benchmarks.md). A successful Query, Scan or
GetItem body is returned as json.loads gives it, which is exactly what the walk produces for these
outputs unless an item holds a binary attribute.
"""
from __future__ import annotations

import json

from botocore import parsers


def may_hold_binary(body: bytes) -> bool:
    """Whether a DynamoDB JSON body may hold a binary value (B/BS: base64 on the wire, bytes once
    botocore has parsed it). Such a value is written `"B":` or `"BS":`; inside a string those quotes
    would be escaped (`\\"B\\":`), so a body without either has none."""
    return b'"B":' in body or b'"BS":' in body


class ItemReadParser(parsers.JSONParser):
    """botocore's JSON protocol parser, except for the body of a successful item read that cannot hold
    a binary attribute (every other body, errors included, goes the usual way)."""

    SHAPES = frozenset({"QueryOutput", "ScanOutput", "GetItemOutput"})

    def _handle_json_body(self, raw_body, shape):
        if (shape is not None and shape.name in self.SHAPES and raw_body
                and not may_hold_binary(raw_body)):
            return json.loads(raw_body)
        return super()._handle_json_body(raw_body, shape)


class ItemReadParserFactory(parsers.ResponseParserFactory):
    def create_parser(self, protocol_name):
        if protocol_name == "json":
            return ItemReadParser(**self._defaults)
        return super().create_parser(protocol_name)
