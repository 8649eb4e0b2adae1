"""DynamoDB Local behind the endpoint: requests forwarded as they came, and the endpoint's own reads
(old items for metering, table descriptions), which are neither metered nor logged."""
from __future__ import annotations

import json

import aiohttp

from stack.strict_endpoint.errors import JSON_CONTENT_TYPE

# DynamoDB Local accepts any signature but wants the header's shape.
UPSTREAM_AUTHORIZATION = ("AWS4-HMAC-SHA256 Credential=strict/20200101/us-east-1/dynamodb/aws4_request, "
                          "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=" + "0" * 64)
PREFIXES = {"dynamodb": "DynamoDB_20120810", "streams": "DynamoDBStreams_20120810"}


class UpstreamError(Exception):
    """DynamoDB Local answered an error to one of the endpoint's own reads."""

    def __init__(self, status: int, body: dict):
        super().__init__(f"{status} {body}")
        self.status, self.body = status, body

    @property
    def code(self) -> str:
        return str(self.body.get("__type", "")).rpartition("#")[2]


class Upstream:
    def __init__(self, url: str):
        self.url = url.rstrip("/") + "/"
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64),
                                                  timeout=aiohttp.ClientTimeout(total=120))
        return self._session

    async def forward(self, service: str, operation: str, body: bytes) -> tuple[int, bytes, dict[str, str]]:
        """(status, body, headers worth passing on) of one request as the client sent it."""
        headers = {"Content-Type": JSON_CONTENT_TYPE, "X-Amz-Target": f"{PREFIXES[service]}.{operation}",
                   "X-Amz-Date": "20200101T000000Z", "Authorization": UPSTREAM_AUTHORIZATION}
        async with self.session.post(self.url, data=body, headers=headers) as response:
            data = await response.read()
            kept = {name: response.headers[name] for name in ("x-amzn-RequestId", "x-amz-crc32")
                    if name in response.headers}
            return response.status, data, kept

    async def call(self, operation: str, params: dict, service: str = "dynamodb") -> dict:
        """One call of the endpoint's own; an error answer raises UpstreamError."""
        status, data, _ = await self.forward(service, operation, json.dumps(params).encode())
        body = json.loads(data) if data else {}
        if status != 200:
            raise UpstreamError(status, body)
        return body

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
