"""AWS Signature Version 4 for the page path's DynamoDB requests (comments/table/direct.py).

botocore's SigV4Auth builds an AWSRequest, a header map and the four-step signing key for every call;
a DynamoDB JSON request has one fixed shape (POST to "/", no query string, four or five headers), and
the signing key changes once a day. This writes the same signature from that shape, with the day's
key kept: tests/comments/test_store_reads.py signs one request both ways at one timestamp and
compares the Authorization headers whole.
"""
from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import urlsplit

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "dynamodb"
DEFAULT_PORTS = {"http": 80, "https": 443}


def host_header(url: str) -> str:
    """The Host botocore signs for an endpoint URL: the port only when it is not the scheme's default."""
    parts = urlsplit(url)
    if parts.port is None or DEFAULT_PORTS.get(parts.scheme) == parts.port:
        return parts.hostname
    return f"{parts.hostname}:{parts.port}"


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


class RequestSigner:
    """Signs POSTs of JSON to an endpoint's "/" for one region, with botocore credentials (refreshable
    or not: each call asks them for their current frozen values, as botocore does)."""

    def __init__(self, credentials, region: str, url: str):
        self._credentials = credentials
        self.region = region
        self.host = host_header(url)
        self._keys: tuple[str, str, bytes] | None = None  # (secret, day, signing key): one day's key

    def _signing_key(self, secret: str, day: str) -> bytes:
        kept = self._keys
        if kept is not None and kept[0] == secret and kept[1] == day:
            return kept[2]
        key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret}".encode(), day), self.region), SERVICE), "aws4_request")
        self._keys = (secret, day, key)
        return key

    def headers(self, headers: dict[str, str], body: bytes, amz_date: str | None = None) -> dict[str, str]:
        """`headers` (names as sent; no Host) plus Host, X-Amz-Date, the session token if any, and the
        Authorization that signs them all and the body. `amz_date`: "20240305T130405Z", default now."""
        frozen = self._credentials.get_frozen_credentials()
        amz_date = amz_date or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        day = amz_date[:8]
        signed = {**headers, "Host": self.host, "X-Amz-Date": amz_date}
        if frozen.token:
            signed["X-Amz-Security-Token"] = frozen.token
        canonical = sorted((name.lower(), " ".join(value.split())) for name, value in signed.items())
        names = ";".join(name for name, _ in canonical)
        request = "\n".join(["POST", "/", "", *(f"{name}:{value}" for name, value in canonical), "", names,
                             hashlib.sha256(body).hexdigest()])
        scope = f"{day}/{self.region}/{SERVICE}/aws4_request"
        to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(request.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(frozen.secret_key, day), to_sign.encode(), hashlib.sha256).hexdigest()
        signed["Authorization"] = (f"{ALGORITHM} Credential={frozen.access_key}/{scope}, SignedHeaders={names}, "
                                   f"Signature={signature}")
        return signed
