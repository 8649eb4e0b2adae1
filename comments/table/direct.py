"""The page path's Query, sent as one signed HTTP request instead of through botocore's pipeline.

A 21-item Query through a botocore client costs about twice the CPU of the same request signed with
botocore's own SigV4 signer and sent on a kept-alive urllib3 connection (docs/performance.md): most
of the difference is botocore's per-call machinery (about ten events, endpoint rules, the
User-Agent, request objects built twice), not the signing. Product pages make one or two Queries
each, so this is a sizeable part of a deep page's CPU.

Only the happy path is done here. One attempt, and any answer but a 200 whose body is plain JSON
(an error, a throttle, a CRC32 mismatch, a binary attribute) makes the same call again through the
botocore client, which retries, parses errors and raises exactly as before (so `store_errors` turns a
real failure into StoreUnavailable). When the attempt got no answer at all (a timeout, a refused or
dropped connection), it counts as the first of DYNAMODB_MAX_ATTEMPTS: the call goes to a client
allowed one attempt fewer (`retry_client`, built on first need; None: no attempt is left), so a dead DynamoDB still
becomes a 503 within the same time as before. The signing, the credentials (refreshed as botocore
refreshes them), the region, the endpoint and the timeouts are the botocore client's own.
"""
from __future__ import annotations

import json
import threading
import zlib
from typing import Callable

import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import EndpointConnectionError

TARGET_PREFIX = "DynamoDB_20120810."
CONTENT_TYPE = "application/x-amz-json-1.0"


def may_hold_binary(body: bytes) -> bool:
    """Whether a DynamoDB JSON body may hold a binary value (B/BS: base64 on the wire, bytes once
    botocore has parsed it). Such a value is written `"B":` or `"BS":`; inside a string those quotes
    would be escaped (`\\"B\\":`), so a body without either has none."""
    return b'"B":' in body or b'"BS":' in body


class DirectReads:
    """Query on a botocore DynamoDB client's endpoint, region and timeouts, signed with `credentials`
    (botocore Credentials, refreshable or not; None: every call goes through the client, which
    then says what is missing)."""

    def __init__(self, client, credentials, make_retry_client: Callable[[], object] | None = None):
        """`make_retry_client` builds the client for calls whose direct attempt got no answer (None: no
        attempt is left for them); it is called on first need, since a botocore client takes about a
        tenth of a second of CPU to build."""
        self.client = client
        self._make_retry_client, self._retry_client, self._lock = make_retry_client, None, threading.Lock()
        meta = client.meta
        config = meta.config
        self.url = meta.endpoint_url.rstrip("/") + "/"
        self.region = meta.region_name
        self._credentials = credentials
        self.pool = urllib3.connection_from_url(
            self.url, maxsize=config.max_pool_connections, block=False, retries=False,
            timeout=urllib3.Timeout(connect=config.connect_timeout, read=config.read_timeout))
        self.fallbacks = 0  # calls that went through botocore instead (tests and benchmarks read it)

    @property
    def retry_client(self):
        if self._make_retry_client is not None and self._retry_client is None:
            with self._lock:
                if self._retry_client is None:
                    self._retry_client = self._make_retry_client()
        return self._retry_client

    def signed_request(self, operation: str, params: dict) -> AWSRequest:
        """The request botocore would send for `operation` (tests compare the two)."""
        request = AWSRequest(method="POST", url=self.url, data=json.dumps(params, separators=(",", ":")).encode(),
                             headers={"Content-Type": CONTENT_TYPE, "X-Amz-Target": TARGET_PREFIX + operation})
        SigV4Auth(self._credentials.get_frozen_credentials(), "dynamodb", self.region).add_auth(request)
        return request

    def _send(self, operation: str, params: dict):
        """The parsed answer; else the botocore client that must make this call."""
        if self._credentials is None:
            return self.client
        request = self.signed_request(operation, params)
        try:
            response = self.pool.urlopen("POST", self.url, body=request.data, headers=dict(request.headers.items()),
                                          redirect=False, preload_content=True)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if self.retry_client is None:
                raise EndpointConnectionError(endpoint_url=self.url, error=exc) from exc
            return self.retry_client
        body = response.data
        if response.status != 200 or may_hold_binary(body):
            return self.client
        crc = response.headers.get("x-amz-crc32")
        if crc is not None and int(crc) != zlib.crc32(body):
            return self.client
        return json.loads(body)

    def query(self, **params) -> dict:
        found = self._send("Query", params)
        if isinstance(found, dict):
            return found
        self.fallbacks += 1
        return found.query(**params)
