"""The one place the library builds AWS clients (the sources' tables, the page path's Query, DynamoDB
Streams, the DynamoDB index, S3 for the files backend), from one policy, settings.PAGINATION_INDEX["AWS"]:

- credentials from boto3's default chain (environment, profile, SSO, container and instance
  credentials), resolved once per process and refreshed as botocore refreshes them; keys are never
  passed, except the dummy pair `local`/`local` when an endpoint is set (an emulator) and the chain,
  asked without the instance metadata service, has none;
- the region and endpoint as boto3 finds them (AWS_REGION / the profile's region, AWS_ENDPOINT_URL and
  AWS_ENDPOINT_URL_<SERVICE>, a profile's endpoint_url) unless REGION / ENDPOINT_URL say otherwise; a
  client pointed at an endpoint of its own (an emulator) with no region anywhere gets us-east-1;
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

import contextvars

import botocore
import botocore.session
from botocore.config import Config
from botocore.exceptions import NoRegionError
from django.core.exceptions import ImproperlyConfigured

from pagination_index import signals
from pagination_index.aws.parsers import ItemReadParserFactory
from pagination_index.conf import index_settings

PAGE, BACKGROUND, BULK, PROBE = "page", "background", "bulk", "probe"
USES = (PAGE, BACKGROUND, BULK, PROBE)
REQUEST_TAG_HEADER = "X-Request-Tag"
DUMMY_KEYS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}
EMULATOR_REGION = "us-east-1"  # what an emulator is told when nothing configures a region

# botocore rebuilds its default User-Agent, a dozen components sanitised character by character, twice
# per call (bench/notes/performance.md). A fixed one is built once.
USER_AGENT = f"django-pagination-index Botocore/{botocore.__version__}"

# The request a call serves (the host project sets it per request, e.g. to its request id). Sent as
# X-Request-Tag, unsigned, to an endpoint of one's own only (an emulator's request log groups by it).
request_tag: contextvars.ContextVar[str | None] = contextvars.ContextVar("pagination_index_request_tag", default=None)

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
    if not index_settings.AWS["VERIFY_TLS"]:
        return False
    return session().get_config_variable("ca_bundle") or True


def endpoint_url(service: str) -> str | None:
    """The endpoint a client of `service` is pointed at besides AWS's own: ENDPOINT_URL for DynamoDB
    and its streams, else what boto3's configuration says (AWS_ENDPOINT_URL_<SERVICE>,
    AWS_ENDPOINT_URL, the profile's endpoint_url); None: AWS."""
    configured = index_settings.AWS["ENDPOINT_URL"]
    if configured and service in ("dynamodb", "dynamodbstreams"):
        return configured
    return _configured_endpoint(session().get_service_model(service).service_id)


def _configured_endpoint(service_id) -> str | None:
    """botocore's own lookup of a configured endpoint for a service (environment, then config file)."""
    from botocore.configprovider import ConfiguredEndpointProvider

    core = session()
    provider = ConfiguredEndpointProvider(full_config=core.full_config, scoped_config=core.get_scoped_config(),
                                          client_name=service_id.hyphenize())
    return provider.provide()


def region(endpoint: str | None = None) -> str:
    """REGION, else boto3's (AWS_REGION, AWS_DEFAULT_REGION, the profile's); an emulator's endpoint
    with none configured gets us-east-1; AWS itself with none is a configuration error."""
    configured = index_settings.AWS["REGION"] or session().get_config_variable("region")
    if configured:
        return configured
    if endpoint:
        return EMULATOR_REGION
    raise ImproperlyConfigured(
        "No AWS region is configured: set AWS_REGION (or a profile's region), or "
        "PAGINATION_INDEX['AWS']['REGION'].")


def retry_policy(use: str, attempts: int | None = None, mode: str | None = None) -> dict:
    """botocore's retry settings for a use. Page requests: standard mode (jittered exponential backoff,
    a retry quota) within `attempts` (default AWS MAX_ATTEMPTS); background and bulk work:
    adaptive mode (the standard mode plus a client-side rate limiter that slows down on throttles),
    unless `mode` says otherwise (a client whose calls go to many keys: one throttled key must not slow
    them all)."""
    if mode:
        return {**retry_policy(use, attempts), "mode": mode}
    config = index_settings.AWS
    if use == PAGE:
        return {"mode": "standard", "total_max_attempts": attempts or config["MAX_ATTEMPTS"]}
    if use == PROBE:
        return {"mode": "standard", "total_max_attempts": 1}
    if use == BACKGROUND:
        return {"mode": "adaptive", "total_max_attempts": attempts or config["BACKGROUND_MAX_ATTEMPTS"]}
    if use == BULK:
        return {"mode": "adaptive", "total_max_attempts": attempts or config["BULK_MAX_ATTEMPTS"]}
    raise ValueError(f"unknown use {use!r}; one of {USES}")


def config(use: str, *, connect_timeout: float, read_timeout: float, attempts: int | None = None,
           max_pool_connections: int = 32, retry_mode: str | None = None) -> Config:
    """Timeouts and retries for a use. botocore's check of each call's parameters against the model
    is off: the calls are the project's own, covered by the tests, and AWS validates every request
    itself (a bad one is a ValidationException)."""
    return Config(connect_timeout=connect_timeout, read_timeout=read_timeout, retries=retry_policy(use, attempts, retry_mode),
                  max_pool_connections=max_pool_connections, user_agent=USER_AGENT, parameter_validation=False)


def client(service: str, use: str, *, region_name: str | None = None, endpoint: str | None = None,
           connect_timeout: float | None = None, read_timeout: float | None = None, attempts: int | None = None,
           max_pool_connections: int = 32, retry_mode: str | None = None):
    """A boto3-compatible low-level client of `service` for `use` (one of USES). Endpoint, region and
    timeouts default to settings.PAGINATION_INDEX["AWS"] and boto3's configuration; `retry_mode`
    replaces the use's botocore retry mode."""
    config_ = index_settings.AWS
    endpoint = endpoint or endpoint_url(service)
    kwargs = {}
    if endpoint and not chain_has_credentials():
        kwargs.update(DUMMY_KEYS)  # an emulator accepts any keys: don't make developers configure some
    try:
        with _lock:  # creating clients from one botocore session is not thread-safe
            made = session().create_client(
                service, region_name=region_name or region(endpoint), endpoint_url=endpoint, verify=verify(),
                config=config(use, connect_timeout=connect_timeout or config_["CONNECT_TIMEOUT"],
                              read_timeout=read_timeout or config_["READ_TIMEOUT"], attempts=attempts,
                              max_pool_connections=max_pool_connections, retry_mode=retry_mode),
                **kwargs)
    except NoRegionError as exc:
        raise ImproperlyConfigured(str(exc)) from exc
    if endpoint:
        made.meta.events.register(f"before-send.{made.meta.service_model.endpoint_prefix}.*", tag_request)
    signals.aws_client_created.send(sender=service, client=made, use=use)
    return made


def tag_request(request, **kwargs) -> None:
    """Name the request a call serves (X-Request-Tag, unsigned, as a proxy would add it), so an
    emulator's request log (the strict endpoint's) groups every attempt of one page request."""
    tag = request_tag.get()
    if tag:
        request.headers[REQUEST_TAG_HEADER] = tag


def reset() -> None:
    """Forget the session, the clients and what the chain was found to hold (the settings or the
    environment changed: tests)."""
    session.cache_clear()
    chain_has_credentials.cache_clear()
    shared_client.cache_clear()
    direct_reads.cache_clear()


@functools.cache
def shared_client(service: str, use: str):
    """The process's client of `service` for `use`, on the settings' endpoint, region and timeouts
    (bulk work gets BULK_READ_TIMEOUT)."""
    read_timeout = index_settings.AWS["BULK_READ_TIMEOUT"] if use == BULK else None
    return client(service, use, read_timeout=read_timeout)


@functools.cache
def direct_reads():
    """The page path's Query (pagination_index/aws/direct.py) on the shared PAGE client's endpoint,
    credentials, timeouts and attempt budget."""
    from pagination_index.aws.direct import DirectReads

    made = shared_client("dynamodb", PAGE)
    endpoint = endpoint_url("dynamodb")
    return DirectReads(made, credentials(endpoint), attempts=index_settings.AWS["MAX_ATTEMPTS"], verify=verify(),
                       tag_requests=bool(endpoint))
