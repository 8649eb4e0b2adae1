"""Who signed a request: the credentials the endpoint knows (static AKIA keys and the temporary ASIA
keys it issues), and a check of each request's Signature Version 4 recomputed with botocore's own
SigV4Auth over the headers the client signed and the body, compared in constant time."""
from __future__ import annotations

import base64
import calendar
import hmac
import re
import secrets
import string
import threading
import time
from dataclasses import dataclass, field

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from stack.strict_endpoint import errors

AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<day>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request,"
    r"\s*SignedHeaders=(?P<signed>[a-z0-9;\-]+),\s*Signature=(?P<signature>[0-9a-f]{64})$")
# AWS refuses a request whose X-Amz-Date is more than 5 minutes from its own clock ("Signature expired:
# ... is now earlier than ... (... - 5 min.)").
ALLOWED_SKEW = 300
SIGNING_SERVICE = "dynamodb"  # DynamoDB Streams is signed for "dynamodb" too
# Temporary keys expired longer ago than this are forgotten (then unknown, not expired).
FORGET_AFTER = 3600
_KEY_CHARS = string.ascii_uppercase + string.digits


def new_key_id(prefix: str) -> str:
    """A key id shaped like AWS's: AKIA (long-term) or ASIA (temporary) and 16 characters."""
    return prefix + "".join(secrets.choice(_KEY_CHARS) for _ in range(16))


def new_secret() -> str:
    return base64.b64encode(secrets.token_bytes(30)).decode()  # 40 characters, as AWS's


@dataclass
class Identity:
    key_id: str
    secret: str
    principal: str
    token: str | None = None
    expires_at: float | None = None  # temporary credentials only
    issuer: str | None = None  # the name of the temporary credentials they were issued under

    @property
    def temporary(self) -> bool:
        return self.expires_at is not None


@dataclass
class Issuer:
    """Temporary credentials served under `name`: each lives `lifetime` seconds; a new one is issued
    every `rotate_every` seconds (so the one served has at least lifetime - rotate_every left)."""
    name: str
    principal: str
    lifetime: float
    rotate_every: float
    current: Identity | None = None
    issued_at: float = 0.0
    issued: int = field(default=0)


class CredentialStore:
    def __init__(self, *, region: str, account: str):
        self.region, self.account = region, account
        self._keys: dict[str, Identity] = {}
        self._issuers: dict[str, Issuer] = {}
        self._lock = threading.Lock()

    # --- configuration -------------------------------------------------------------------------
    def add_static(self, key_id: str, secret: str, principal: str = "default") -> Identity:
        identity = Identity(key_id, secret, principal)
        self._keys[key_id] = identity
        return identity

    def configure_issuer(self, name: str, *, lifetime: float, rotate_every: float | None = None,
                         principal: str | None = None) -> Issuer:
        if lifetime <= 0:
            raise ValueError("lifetime must be positive")
        rotate_every = lifetime / 2 if rotate_every is None else rotate_every
        if not 0 < rotate_every <= lifetime:
            raise ValueError("rotate_every must be in (0, lifetime]")
        issuer = Issuer(name, principal or name, float(lifetime), float(rotate_every))
        self._issuers[name] = issuer
        return issuer

    def issue(self, name: str, now: float, *, rotate: bool = False) -> Identity:
        """The temporary credentials `name` serves now; new ones when the current are due (or `rotate`)."""
        with self._lock:
            issuer = self._issuers[name]
            if rotate or issuer.current is None or now - issuer.issued_at >= issuer.rotate_every:
                identity = Identity(new_key_id("ASIA"), new_secret(), issuer.principal,
                                    token=base64.b64encode(secrets.token_bytes(96)).decode(),
                                    expires_at=now + issuer.lifetime, issuer=name)
                self._keys[identity.key_id] = identity
                issuer.current, issuer.issued_at, issuer.issued = identity, now, issuer.issued + 1
                self._forget_expired(now)
            return issuer.current

    def expire(self, name: str, now: float) -> None:
        """End `name`'s current credentials now (the next request with them is refused)."""
        with self._lock:
            issuer = self._issuers[name]
            if issuer.current is not None:
                issuer.current.expires_at = now
                issuer.current = None

    def issuers(self) -> dict[str, dict]:
        return {name: {"principal": issuer.principal, "lifetime": issuer.lifetime,
                       "rotate_every": issuer.rotate_every, "issued": issuer.issued}
                for name, issuer in self._issuers.items()}

    def principals_of_keys(self) -> dict[str, str]:
        return {key_id: identity.principal for key_id, identity in self._keys.items()}

    def _forget_expired(self, now: float) -> None:
        for key_id in [key_id for key_id, identity in self._keys.items()
                       if identity.temporary and identity.expires_at < now - FORGET_AFTER]:
            del self._keys[key_id]

    # --- checking a request ----------------------------------------------------------------------
    def authenticate(self, method: str, path_qs: str, headers, body: bytes, now: float) -> Identity:
        """The identity that signed the request, or the AwsError AWS would answer."""
        authorization = headers.get("Authorization")
        if not authorization:
            raise errors.missing_authentication()
        match = AUTHORIZATION.match(authorization)
        if match is None:
            raise errors.incomplete_signature(
                "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters "
                "(AWS4-HMAC-SHA256).")
        identity = self._keys.get(match["key"])
        token = headers.get("X-Amz-Security-Token")
        if identity is None or (identity.token or None) != (token or None):
            raise errors.unrecognized_client()
        if identity.temporary and identity.expires_at <= now:
            raise errors.expired_token()
        amz_date = headers.get("X-Amz-Date", "")
        try:
            signed_at = calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
        except ValueError:
            raise errors.incomplete_signature(
                "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.") from None
        if signed_at < now - ALLOWED_SKEW:
            raise errors.invalid_signature(
                f"Signature expired: {amz_date} is now earlier than {_stamp(now - ALLOWED_SKEW)} "
                f"({_stamp(now)} - 5 min.)")
        if signed_at > now + ALLOWED_SKEW:
            raise errors.invalid_signature(
                f"Signature not yet current: {amz_date} is still later than {_stamp(now + ALLOWED_SKEW)} "
                f"({_stamp(now)} + 5 min.)")
        if match["day"] != amz_date[:8]:
            raise errors.invalid_signature("Date in Credential scope does not match YYYYMMDD from ISO-8601 "
                                           "version of date from HTTP")
        if match["region"] != self.region:
            raise errors.invalid_signature(f"Credential should be scoped to a valid region, not '{match['region']}'.")
        if match["service"] != SIGNING_SERVICE:
            raise errors.invalid_signature(f"Credential should be scoped to correct service: '{SIGNING_SERVICE}'.")
        expected, signed_names = self._signature(identity, method, path_qs, headers, body, amz_date,
                                                 match["signed"].split(";"))
        if signed_names != match["signed"] or not hmac.compare_digest(expected, match["signature"]):
            raise errors.invalid_signature()
        return identity

    def _signature(self, identity: Identity, method, path_qs, headers, body, amz_date, names) -> tuple[str, str]:
        """botocore's signature over exactly the headers the client says it signed (the names botocore
        itself would sign among them come back too: a client signing fewer or others does not match)."""
        signed = {name: ",".join(headers.getall(name)) for name in names if name in headers}
        request = AWSRequest(method=method, url=f"https://{headers.get('Host', '')}{path_qs}", data=body,
                             headers=signed)
        request.context["timestamp"] = amz_date
        signer = SigV4Auth(Credentials(identity.key_id, identity.secret, identity.token), SIGNING_SERVICE,
                           self.region)
        canonical = signer.canonical_request(request)
        return (signer.signature(signer.string_to_sign(request, canonical), request),
                signer.signed_headers(signer.headers_to_sign(request)))


def _stamp(epoch: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch))
