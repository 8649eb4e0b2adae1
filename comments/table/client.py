"""The one place that builds boto3 clients for the comments table (settings.DYNAMODB), and the one
place that says what a DynamoDB failure is to the rest of the site: StoreUnavailable.

Low-level clients (not the resource layer): they are thread-safe, and deserialising our few
attribute types by hand is several times cheaper than boto3's TypeDeserializer.

The DynamoDB client also skips botocore's walk of the response model for item reads (Query, Scan,
GetItem): DynamoDB's wire JSON already is the parsed form ({"S": "..."}, {"N": "..."} maps), and the
walk was a quarter of that call's CPU for a 21-item Query (docs/benchmarks.md).
"""
from __future__ import annotations

import functools
import json
import os
from contextlib import contextmanager

import boto3
import botocore
import botocore.session
from botocore import parsers
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.core.signals import setting_changed

from comments.table.direct import DirectReads, may_hold_binary
from metrics import instrument_client
from pagination_index import SourceUnavailable

# Health checks want a fast answer, not a patient one: one attempt, short timeouts.
PROBE_CONFIG = Config(connect_timeout=1, read_timeout=2, retries={"total_max_attempts": 1, "mode": "standard"})


# botocore rebuilds its default User-Agent, a dozen components sanitised character by character, twice
# per call: 13% of a 21-item Query's CPU (docs/performance.md). A fixed one is built once.
USER_AGENT = f"corner-shop Botocore/{botocore.__version__}"


def client_config(*, bulk: bool = False, attempts: int | None = None) -> Config:
    """Timeouts and attempts from settings.DYNAMODB: a dead DynamoDB must become a 503 within
    seconds, not hold a worker (worst case about attempts x (connect or read timeout)). Bulk reads
    (rebuild, verify: Scans and whole partitions, 1 MB a page) get a patient read timeout.

    botocore's check of each call's parameters against the model is off (another 5% of a Query's
    CPU): the calls are this package's own, covered by the tests, and DynamoDB validates every
    request itself (a bad one is a ClientError, so StoreUnavailable, like a failed check)."""
    config = settings.DYNAMODB
    return Config(
        connect_timeout=config["CONNECT_TIMEOUT"],
        read_timeout=config["BULK_READ_TIMEOUT" if bulk else "READ_TIMEOUT"],
        retries={"total_max_attempts": attempts or config["MAX_ATTEMPTS"], "mode": "standard"},
        max_pool_connections=32,
        user_agent=USER_AGENT,
        parameter_validation=False,
    )


class StoreUnavailable(SourceUnavailable):
    """DynamoDB could not be reached or failed: the request is answered 503, not 500
    (shop.middleware.ServiceUnavailableMiddleware)."""


@contextmanager
def store_errors(what: str):
    """Turn any botocore failure inside the block into StoreUnavailable, naming `what` was tried.
    Expected errors (a failed condition) are caught inside the block, before they get here."""
    try:
        yield
    except (BotoCoreError, ClientError) as exc:
        raise StoreUnavailable(f"{what}: {exc}") from exc


def _client_kwargs(config_override: Config | None = None) -> dict:
    config = settings.DYNAMODB
    kwargs = {"region_name": config["REGION"], "config": config_override or client_config()}
    if config.get("ENDPOINT_URL"):
        kwargs["endpoint_url"] = config["ENDPOINT_URL"]
        # DynamoDB Local accepts any credentials; don't make developers configure fake ones.
        if not (os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")):
            kwargs["aws_access_key_id"] = "local"
            kwargs["aws_secret_access_key"] = "local"
    return kwargs


class ItemReadParser(parsers.JSONParser):
    """botocore's JSON protocol parser, except that a successful item read's body is returned as
    json.loads gives it. That is exactly what the model walk produces for these outputs unless an item
    holds a binary attribute (`may_hold_binary`: a body that may, e.g. one with a map key "B", just
    goes the usual way, as does every error)."""

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


def _item_read_session() -> boto3.session.Session:
    core = botocore.session.Session()
    core.register_component("response_parser_factory", ItemReadParserFactory())
    return boto3.session.Session(botocore_session=core)


@functools.cache
def dynamodb():
    return instrument_client(_item_read_session().client("dynamodb", **_client_kwargs()))


@functools.cache
def dynamodb_reads() -> DirectReads:
    """The page path's Query, one signed HTTP request on dynamodb()'s endpoint, credentials and
    timeouts, and through dynamodb() itself whenever the answer is not a plain 200
    (comments/table/direct.py)."""
    kwargs = _client_kwargs()
    if "aws_access_key_id" in kwargs:
        credentials = Credentials(kwargs["aws_access_key_id"], kwargs["aws_secret_access_key"])
    else:
        credentials = botocore.session.Session().get_credentials()  # botocore's chain, as the client's
    attempts = settings.DYNAMODB["MAX_ATTEMPTS"]

    def retry_client():
        return instrument_client(_item_read_session().client("dynamodb", **_client_kwargs(client_config(attempts=attempts - 1))))

    return DirectReads(dynamodb(), credentials, retry_client if attempts > 1 else None)


@functools.cache
def dynamodb_bulk():
    """The DynamoDB client for commands that read whole partitions or the whole table."""
    return instrument_client(_item_read_session().client("dynamodb", **_client_kwargs(client_config(bulk=True))))


@functools.cache
def dynamodb_probe():
    """A DynamoDB client for /readyz: it fails within seconds instead of retrying."""
    return boto3.session.Session().client("dynamodb", **_client_kwargs(PROBE_CONFIG))


@functools.cache
def dynamodbstreams():
    return instrument_client(boto3.session.Session().client("dynamodbstreams", **_client_kwargs()))


def reset_clients() -> None:
    dynamodb.cache_clear()
    dynamodb_reads.cache_clear()
    dynamodb_bulk.cache_clear()
    dynamodb_probe.cache_clear()
    dynamodbstreams.cache_clear()


def _on_setting_changed(*, setting, **kwargs):
    if setting == "DYNAMODB":
        reset_clients()


setting_changed.connect(_on_setting_changed)
