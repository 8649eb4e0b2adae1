"""The page path's Query, sent as one signed HTTP request instead of through botocore's pipeline.

botocore's per-call machinery (about ten events, endpoint rules, request objects built twice, the
signing key derived afresh) and urllib3's (a header dict and response object of its own, a liveness
poll of the socket before every reuse) cost more than the HTTP itself; docs/performance.md measures
the three ways a crawl page's Query can be sent (bench/query_paths.py) and says why this one stays.

It is a whole DynamoDB client for one call, within the same rules as the botocore client beside it:
the same endpoint, region, credentials (refreshed as botocore refreshes them), timeouts and TLS
verification (the CA bundle, or none when verification is off); when a proxy applies to the endpoint
(HTTPS_PROXY/NO_PROXY) it steps aside and every call goes through the botocore client, which speaks
to proxies. Its attempts count in one budget, DYNAMODB_MAX_ATTEMPTS, with jittered exponential
backoff between them: a throttle, a 5xx, a CRC32 mismatch or no answer at all is tried again while
the budget lasts; any other error is raised at once, parsed by botocore's own parser into the
client's exception class (a ValidationException is never retried). A kept-alive connection that the
server closed while it sat idle is not an attempt: the Query is sent again at once on a new one.
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
from botocore.parsers import create_parser
from botocore.utils import get_environ_proxies

from aws import REQUEST_ID_HEADER
from aws.parsers import may_hold_binary
from aws.retries import Backoff
from comments.table.signing import RequestSigner
from shop.logs import current_request_id

TARGET_PREFIX = "DynamoDB_20120810."
CONTENT_TYPE = "application/x-amz-json-1.0"
# What a kept-alive connection closed by the server meanwhile raises when it is used again.
IDLE_CLOSED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


# Between attempts of one page request: short, since the page has a read timeout to keep.
PAGE_BACKOFF = Backoff(base=0.025, cap=0.5)
# What botocore's standard retry mode retries for DynamoDB besides 5xx answers.
RETRYABLE_CODES = frozenset({
    "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
    "Throttling", "ThrottledException", "TransactionInProgressException", "RequestThrottled",
    "RequestThrottledException", "LimitExceededException", "BandwidthLimitExceeded", "SlowDown",
    "PriorRequestNotComplete", "EC2ThrottledException", "TooManyRequestsException",
})


@dataclass(frozen=True)
class SignedRequest:
    method: str
    url: str
    data: bytes
    headers: dict[str, str]


def tls_context(verify: bool | str) -> ssl.SSLContext:
    """What botocore's `verify` means: True, the default CAs; a path, that CA bundle; False, no checks."""
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)


class Connections:
    """Kept-alive HTTP/1.1 connections to one endpoint: taken by one thread for one request and put
    back (at most `maxsize` idle ones are kept). The read timeout applies to every answer."""

    def __init__(self, url: str, *, connect_timeout: float, read_timeout: float, maxsize: int,
                 verify: bool | str = True):
        parts = urlsplit(url)
        self.secure = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port
        self.connect_timeout, self.read_timeout, self.maxsize = connect_timeout, read_timeout, maxsize
        self._context = tls_context(verify) if self.secure else None
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
    (botocore Credentials, refreshable or not; None: every call goes through the client, which then
    says what is missing), in at most `attempts` requests. `tag_requests`: send X-Shop-Request-Id,
    as the client layer does for an endpoint override (an emulator's request log groups by it)."""

    def __init__(self, client, credentials, *, attempts: int, verify: bool | str = True,
                 backoff: Backoff = PAGE_BACKOFF, tag_requests: bool = False):
        self.client = client
        self.attempts, self.backoff = max(1, attempts), backoff
        meta = client.meta
        config = meta.config
        self.url = meta.endpoint_url.rstrip("/") + "/"
        self.region = meta.region_name
        # botocore speaks to proxies; this does not, so it steps aside when one applies.
        direct = credentials is not None and not get_environ_proxies(self.url)
        self.signer = RequestSigner(credentials, self.region, self.url) if direct else None
        self.connections = Connections(self.url, connect_timeout=config.connect_timeout, verify=verify,
                                       read_timeout=config.read_timeout, maxsize=config.max_pool_connections)
        # An emulator's request log groups a page request's attempts by this header (aws.tag_request).
        self.tag_requests = tag_requests
        self._parser = create_parser("json")
        self._output = meta.service_model.operation_model("Query").output_shape

    def signed_request(self, operation: str, params: dict, amz_date: str | None = None) -> SignedRequest:
        """The request botocore would send for `operation` (tests compare the two)."""
        body = json.dumps(params, separators=(",", ":")).encode()
        headers = {"Content-Type": CONTENT_TYPE, "X-Amz-Target": TARGET_PREFIX + operation}
        return SignedRequest("POST", self.url, body, self.signer.headers(headers, body, amz_date))

    def _parse(self, status: int, headers, body: bytes) -> dict:
        """botocore's own parse of an answer (an error's code and message, or binary attributes)."""
        return self._parser.parse({"status_code": status, "headers": dict(headers), "body": body}, self._output)

    def query(self, **params) -> dict:
        if self.signer is None:
            return self.client.query(**params)
        failure: Exception | None = None
        for attempt in range(self.attempts):
            if attempt:
                self.backoff.sleep(attempt - 1)
            request = self.signed_request("Query", params)
            headers = request.headers
            request_id = current_request_id.get() if self.tag_requests else None
            if request_id:
                headers = {**headers, REQUEST_ID_HEADER: request_id}
            try:
                status, answer_headers, body = self.connections.post(headers, request.data)
            except (http.client.HTTPException, OSError) as exc:
                failure = EndpointConnectionError(endpoint_url=self.url, error=exc)
                continue
            crc = answer_headers.get("x-amz-crc32")
            if crc is not None and int(crc) != zlib.crc32(body):
                failure = EndpointConnectionError(endpoint_url=self.url, error="CRC32 mismatch")
                continue
            if status == 200:
                return self._parse(status, answer_headers, body) if may_hold_binary(body) else json.loads(body)
            parsed = self._parse(status, answer_headers, body)
            code = parsed.get("Error", {}).get("Code", "")
            failure = self.client.exceptions.from_code(code)(parsed, "Query")
            if status < 500 and code not in RETRYABLE_CODES:
                raise failure
        raise failure
