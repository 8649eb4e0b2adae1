"""The one place that builds AWS clients (the comments table, the page path, DynamoDB Streams, the
DynamoDB index, S3 for the files backend), from one policy:

- credentials from boto3's default chain (environment, profile, SSO, container and instance
  credentials), resolved once per process and refreshed as botocore refreshes them; keys are never
  passed, except the dummy pair `local`/`local` when an endpoint is set (an emulator) and the chain,
  asked without the instance metadata service, has none;
- TLS verification and the CA bundle as botocore reads them (`AWS_CA_BUNDLE`, a profile's
  `ca_bundle`), with `AWS_VERIFY_TLS=0` to turn verification off for a test emulator; proxies from
  `HTTPS_PROXY`/`NO_PROXY`, as botocore reads them;
- retries per use (`PAGE`: standard mode within the page's attempt budget, so a failing DynamoDB is
  a quick 503; `BACKGROUND` and `BULK`: adaptive mode, many attempts, so a throttling burst slows a
  consumer or a rebuild down instead of aborting it). botocore's retry modes are the only retry
  layer for single calls; aws.retries holds the two loops botocore has none for.
"""
from __future__ import annotations

import functools
import threading

import botocore
import botocore.session
from botocore.config import Config
from django.conf import settings

import metrics
from aws.parsers import ItemReadParserFactory
from shop.logs import current_request_id

PAGE, BACKGROUND, BULK, PROBE = "page", "background", "bulk", "probe"
USES = (PAGE, BACKGROUND, BULK, PROBE)
REQUEST_ID_HEADER = "X-Shop-Request-Id"
DUMMY_KEYS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}

# botocore rebuilds its default User-Agent, a dozen components sanitised character by character, twice
# per call (docs/performance.md). A fixed one is built once.
USER_AGENT = f"corner-shop Botocore/{botocore.__version__}"

_lock = threading.Lock()


@functools.cache
def session() -> botocore.session.Session:
    """The process's botocore session: one credential chain, resolved once, shared by every client.
    DynamoDB item reads skip botocore's walk of the response model (aws/parsers.py)."""
    core = botocore.session.Session()
    core.register_component("response_parser_factory", ItemReadParserFactory())
    return core


@functools.cache
def chain_has_credentials() -> bool:
    """Whether boto3's chain finds credentials without asking the instance metadata service (which
    a laptop running an emulator does not have, and asking it costs a timeout)."""
    probe = botocore.session.Session()
    resolver = probe.get_component("credential_provider")
    for name in ("iam-role",):
        try:
            resolver.remove(name)
        except Exception:  # noqa: BLE001 - a botocore without that provider: nothing to remove
            pass
    return probe.get_credentials() is not None


def credentials(endpoint_url: str | None = None):
    """The credentials clients of `endpoint_url` sign with (botocore Credentials, refreshable or not)."""
    if endpoint_url and not chain_has_credentials():
        from botocore.credentials import Credentials

        return Credentials(DUMMY_KEYS["aws_access_key_id"], DUMMY_KEYS["aws_secret_access_key"])
    return session().get_credentials()


def verify() -> bool | str:
    """What botocore is told to verify TLS against: False, a CA bundle's path, or True (its own)."""
    if not settings.AWS["VERIFY_TLS"]:
        return False
    return session().get_config_variable("ca_bundle") or True


def retry_policy(use: str, attempts: int | None = None) -> dict:
    """botocore's retry settings for a use. Page requests: standard mode (jittered exponential backoff,
    a retry quota) within `attempts` (default DYNAMODB_MAX_ATTEMPTS); background and bulk work:
    adaptive mode (the standard mode plus a client-side rate limiter that slows down on throttles)."""
    if use == PAGE:
        return {"mode": "standard", "total_max_attempts": attempts or settings.DYNAMODB["MAX_ATTEMPTS"]}
    if use == PROBE:
        return {"mode": "standard", "total_max_attempts": 1}
    if use == BACKGROUND:
        return {"mode": "adaptive", "total_max_attempts": attempts or settings.AWS["BACKGROUND_MAX_ATTEMPTS"]}
    if use == BULK:
        return {"mode": "adaptive", "total_max_attempts": attempts or settings.AWS["BULK_MAX_ATTEMPTS"]}
    raise ValueError(f"unknown use {use!r}; one of {USES}")


def config(use: str, *, connect_timeout: float, read_timeout: float, attempts: int | None = None,
           max_pool_connections: int = 32) -> Config:
    """Timeouts and retries for a use. botocore's check of each call's parameters against the model
    is off: the calls are the project's own, covered by the tests, and AWS validates every request
    itself (a bad one is a ValidationException)."""
    return Config(connect_timeout=connect_timeout, read_timeout=read_timeout, retries=retry_policy(use, attempts),
                  max_pool_connections=max_pool_connections, user_agent=USER_AGENT, parameter_validation=False)


def client(service: str, use: str, *, region: str, endpoint_url: str | None = None, connect_timeout: float,
           read_timeout: float, attempts: int | None = None, max_pool_connections: int = 32):
    """A boto3-compatible low-level client of `service` for `use` (one of USES)."""
    kwargs = {}
    if endpoint_url and not chain_has_credentials():
        kwargs.update(DUMMY_KEYS)  # an emulator accepts any keys: don't make developers configure some
    with _lock:  # creating clients from one botocore session is not thread-safe
        made = session().create_client(
            service, region_name=region, endpoint_url=endpoint_url or None, verify=verify(),
            config=config(use, connect_timeout=connect_timeout, read_timeout=read_timeout, attempts=attempts,
                          max_pool_connections=max_pool_connections),
            **kwargs)
    if endpoint_url:
        made.meta.events.register(f"before-send.{made.meta.service_model.endpoint_prefix}.*", tag_request)
    if service in ("dynamodb", "dynamodbstreams"):
        metrics.instrument_client(made)
    return made


def tag_request(request, **kwargs) -> None:
    """Name the page request a call serves (X-Shop-Request-Id, unsigned, as a proxy would add it), so
    an emulator's request log (the strict endpoint's) groups every attempt of one page request."""
    request_id = current_request_id.get()
    if request_id:
        request.headers[REQUEST_ID_HEADER] = request_id


def reset() -> None:
    """Forget the session and what the chain was found to hold (the environment changed: tests)."""
    session.cache_clear()
    chain_has_credentials.cache_clear()
