"""The page path's Query, sent as one signed HTTP request instead of through botocore's pipeline.

A 21-item Query through a botocore client costs several times the CPU of the same request signed
once (comments/table/signing.py) and sent on a kept-alive `http.client` connection
(docs/performance.md): botocore's per-call machinery (about ten events, endpoint rules, request
objects built twice, the signing key derived afresh) and urllib3's (a header dict and response object
of its own, a liveness poll of the socket before every reuse) cost more than the HTTP itself. Product
pages make one Query each, so this is a sizeable part of a deep page's CPU.

Only the happy path is done here. One attempt, and any answer but a 200 whose body is plain JSON
(an error, a throttle, a CRC32 mismatch, a binary attribute) makes the same call again through the
botocore client, which retries, parses errors and raises exactly as before (so `store_errors` turns a
real failure into StoreUnavailable). When the attempt got no answer at all (a timeout, a refused or
dropped connection), it counts as the first of DYNAMODB_MAX_ATTEMPTS: the call goes to a client
allowed one attempt fewer (`retry_client`, built on first need; None: no attempt is left), so a dead
DynamoDB still becomes a 503 within the same time as before. A kept-alive connection that the server
closed while it sat idle is not such a failure: the Query is sent again at once on a new one.
The credentials (refreshed as botocore refreshes them), the region, the endpoint and the timeouts
are the botocore client's own.
"""
from __future__ import annotations

import http.client
import json
import ssl
import threading
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

from botocore.exceptions import EndpointConnectionError

from comments.table.signing import RequestSigner
from metrics import dynamodb_call

TARGET_PREFIX = "DynamoDB_20120810."
CONTENT_TYPE = "application/x-amz-json-1.0"
# What a kept-alive connection closed by the server meanwhile raises when it is used again.
IDLE_CLOSED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def may_hold_binary(body: bytes) -> bool:
    """Whether a DynamoDB JSON body may hold a binary value (B/BS: base64 on the wire, bytes once
    botocore has parsed it). Such a value is written `"B":` or `"BS":`; inside a string those quotes
    would be escaped (`\\"B\\":`), so a body without either has none."""
    return b'"B":' in body or b'"BS":' in body


@dataclass(frozen=True)
class SignedRequest:
    method: str
    url: str
    data: bytes
    headers: dict[str, str]


class Connections:
    """Kept-alive HTTP/1.1 connections to one endpoint: taken by one thread for one request and put
    back (at most `maxsize` idle ones are kept). The read timeout applies to every answer."""

    def __init__(self, url: str, *, connect_timeout: float, read_timeout: float, maxsize: int):
        parts = urlsplit(url)
        self.secure = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port
        self.connect_timeout, self.read_timeout, self.maxsize = connect_timeout, read_timeout, maxsize
        self._context = ssl.create_default_context() if self.secure else None
        self._idle: deque[http.client.HTTPConnection] = deque()

    def _connect(self) -> http.client.HTTPConnection:
        if self.secure:
            connection = http.client.HTTPSConnection(self.host, self.port, timeout=self.connect_timeout,
                                                     context=self._context)
        else:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        connection.connect()
        connection.sock.settimeout(self.read_timeout)
        return connection

    def post(self, headers: dict[str, str], body: bytes) -> tuple[int, http.client.HTTPMessage, bytes]:
        """(status, headers, body) of a POST to "/". Raises OSError or http.client.HTTPException when
        no answer came."""
        try:
            connection, reused = self._idle.pop(), True
        except IndexError:
            connection, reused = self._connect(), False
        try:
            try:
                response, data = self._exchange(connection, headers, body)
            except IDLE_CLOSED:
                if not reused:
                    raise
                connection.close()  # the server closed it while it sat idle: nothing was answered
                connection = self._connect()
                response, data = self._exchange(connection, headers, body)
        except BaseException:
            connection.close()
            raise
        if response.will_close or len(self._idle) >= self.maxsize:
            connection.close()
        else:
            self._idle.append(connection)
        return response.status, response.headers, data

    @staticmethod
    def _exchange(connection, headers, body) -> tuple[http.client.HTTPResponse, bytes]:
        connection.request("POST", "/", body=body, headers=headers)
        response = connection.getresponse()
        return response, response.read()


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
        self.signer = RequestSigner(credentials, self.region, self.url) if credentials is not None else None
        self.connections = Connections(self.url, connect_timeout=config.connect_timeout,
                                       read_timeout=config.read_timeout, maxsize=config.max_pool_connections)
        self.fallbacks = 0  # calls that went through botocore instead (tests and benchmarks read it)

    @property
    def retry_client(self):
        if self._make_retry_client is not None and self._retry_client is None:
            with self._lock:
                if self._retry_client is None:
                    self._retry_client = self._make_retry_client()
        return self._retry_client

    def signed_request(self, operation: str, params: dict, amz_date: str | None = None) -> SignedRequest:
        """The request botocore would send for `operation` (tests compare the two)."""
        body = json.dumps(params, separators=(",", ":")).encode()
        headers = {"Content-Type": CONTENT_TYPE, "X-Amz-Target": TARGET_PREFIX + operation}
        return SignedRequest("POST", self.url, body, self.signer.headers(headers, body, amz_date))

    def _send(self, operation: str, params: dict):
        """The parsed answer; else the botocore client that must make this call."""
        if self.signer is None:
            return self.client
        request = self.signed_request(operation, params)
        try:
            status, headers, body = self.connections.post(request.headers, request.data)
        except (http.client.HTTPException, OSError) as exc:
            if self.retry_client is None:
                raise EndpointConnectionError(endpoint_url=self.url, error=exc) from exc
            return self.retry_client
        if status != 200 or may_hold_binary(body):
            return self.client  # the client's call is counted by its own hook (metrics.instrument_client)
        crc = headers.get("x-amz-crc32")
        if crc is not None and int(crc) != zlib.crc32(body):
            return self.client
        dynamodb_call(operation)
        return json.loads(body)

    def query(self, **params) -> dict:
        found = self._send("Query", params)
        if isinstance(found, dict):
            return found
        self.fallbacks += 1
        return found.query(**params)
