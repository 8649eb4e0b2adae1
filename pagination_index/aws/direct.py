"""The page path's Query without botocore's client pipeline: botocore's own SigV4Auth on an AWSRequest,
sent through a urllib3 connection pool.

A crawl page's CPU through the strict endpoint (TLS, signatures checked), three ways
(bench/query_paths.py, bench/notes/performance.md): the botocore client costs about a third more than this
library path; a hand-written signer on `http.client` saved only about 5% more, short of the 20% that
would pay for keeping protocol code of our own, so it went.

It is a whole DynamoDB client for one call, within the same rules as the botocore client beside it:
the same endpoint, region, credentials (refreshed as botocore refreshes them: each request is signed
with their current frozen values), timeouts and TLS verification (the CA bundle, or none when
verification is off). When a proxy applies to the endpoint (HTTPS_PROXY/NO_PROXY) it steps aside and
every call goes through the botocore client, which speaks to proxies. Its attempts count in one
budget, PAGINATION_INDEX["AWS"]["MAX_ATTEMPTS"], with jittered exponential backoff between them: a throttle, a 5xx, a
CRC32 mismatch or no answer at all is tried again while the budget lasts; any other error is raised
at once, parsed by botocore's own parser into the client's exception class (a ValidationException is
never retried).
"""
from __future__ import annotations

import json
import uuid
import zlib

import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import EndpointConnectionError
from botocore.parsers import create_parser
from botocore.utils import get_environ_proxies

from pagination_index import signals
from pagination_index.aws import REQUEST_TAG_HEADER, request_tag
from pagination_index.aws.errors import is_retryable
from pagination_index.aws.parsers import may_hold_binary
from pagination_index.aws.retries import Backoff, page_retries

TARGET_PREFIX = "DynamoDB_20120810."
CONTENT_TYPE = "application/x-amz-json-1.0"
# Between attempts of one page request: short, since the page has a read timeout to keep.
PAGE_BACKOFF = Backoff(base=0.025, cap=0.5)


def connection_pool(*, verify: bool | str, connect_timeout: float, read_timeout: float,
                    maxsize: int) -> urllib3.PoolManager:
    """What botocore's `verify` means: True, the default CAs; a path, that CA bundle; False, no checks.
    urllib3 itself re-sends nothing (one attempt is one request), and checks a kept-alive connection
    before reusing it, so one the server closed while idle is replaced, not counted as an attempt."""
    if verify is False:
        tls = {"cert_reqs": "CERT_NONE"}
    else:
        tls = {"cert_reqs": "CERT_REQUIRED", **({"ca_certs": verify} if isinstance(verify, str) else {})}
    return urllib3.PoolManager(maxsize=maxsize, retries=False, block=False,
                               timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout), **tls)


class DirectReads:
    """Query on a botocore DynamoDB client's endpoint, region and timeouts, signed with `credentials`
    (botocore Credentials, refreshable or not; None: every call goes through the client, which then
    says what is missing), in at most `attempts` requests and, within a page request, its retry
    budget shared by all its Queries (aws.retries.page_retries). `tag_requests`: send X-Request-Tag,
    as the client layer does for an endpoint override (an emulator's request log groups by it)."""

    def __init__(self, client, credentials, *, attempts: int, verify: bool | str = True,
                 backoff: Backoff = PAGE_BACKOFF, tag_requests: bool = False):
        self.client = client
        self.credentials = credentials
        self.attempts, self.backoff, self.tag_requests = max(1, attempts), backoff, tag_requests
        meta = client.meta
        config = meta.config
        self.url = meta.endpoint_url.rstrip("/") + "/"
        self.region = meta.region_name
        # botocore speaks to proxies; this does not, so it steps aside when one applies.
        self.direct = credentials is not None and not get_environ_proxies(self.url)
        self.pool = connection_pool(verify=verify, connect_timeout=config.connect_timeout,
                                    read_timeout=config.read_timeout, maxsize=config.max_pool_connections)
        self._parser = create_parser("json")
        self._output = meta.service_model.operation_model("Query").output_shape

    def signed_request(self, operation: str, params: dict) -> AWSRequest:
        """The request botocore would send for `operation`, signed now (tests compare the two)."""
        body = json.dumps(params, separators=(",", ":")).encode()
        request = AWSRequest(method="POST", url=self.url, data=body,
                             headers={"Content-Type": CONTENT_TYPE, "X-Amz-Target": TARGET_PREFIX + operation})
        SigV4Auth(self.credentials.get_frozen_credentials(), "dynamodb", self.region).add_auth(request)
        return request

    def _parse(self, status: int, headers, body: bytes) -> dict:
        """botocore's own parse of an answer (an error's code and message, or binary attributes)."""
        return self._parser.parse({"status_code": status, "headers": dict(headers), "body": body}, self._output)

    def query(self, **params) -> dict:
        if not self.direct:
            return self.client.query(**params)
        failure: Exception | None = None
        invocation, budget = str(uuid.uuid4()), page_retries.get()
        for attempt in range(self.attempts):
            if attempt:
                if budget is not None and not budget.take():
                    break  # the page request's retries are spent, by this Query or another of its own
                self.backoff.sleep(attempt - 1)
            request = self.signed_request("Query", params)
            headers = dict(request.headers.items())
            # botocore's own (unsigned) retry headers: an endpoint groups a call's attempts by them.
            headers["amz-sdk-invocation-id"] = invocation
            headers["amz-sdk-request"] = f"attempt={attempt + 1}; max={self.attempts}"
            tag = request_tag.get() if self.tag_requests else None
            if tag:
                headers[REQUEST_TAG_HEADER] = tag
            try:
                answer = self.pool.urlopen("POST", self.url, body=request.body, headers=headers)
            except urllib3.exceptions.HTTPError as exc:
                failure = EndpointConnectionError(endpoint_url=self.url, error=exc)
                continue
            status, body = answer.status, answer.data
            crc = answer.headers.get("x-amz-crc32")
            if crc is not None and int(crc) != zlib.crc32(body):
                failure = EndpointConnectionError(endpoint_url=self.url, error="CRC32 mismatch")
                continue
            if status == 200:
                signals.aws_call_answered.send("Query", error_code=None, retries=attempt)
                return self._parse(status, answer.headers, body) if may_hold_binary(body) else json.loads(body)
            parsed = self._parse(status, answer.headers, body)
            code = parsed.get("Error", {}).get("Code", "")
            failure = self.client.exceptions.from_code(code)(parsed, "Query")
            signals.aws_call_answered.send("Query", error_code=code, retries=attempt)
            if not is_retryable(code, status):
                raise failure
        raise failure
