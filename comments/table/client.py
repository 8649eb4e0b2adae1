"""The comments table's clients (settings.DYNAMODB), built by the one client layer (aws/), and the one
place that says what a DynamoDB failure is to the rest of the site: StoreUnavailable.

Low-level clients (not the resource layer): they are thread-safe, and deserialising our few
attribute types by hand is several times cheaper than boto3's TypeDeserializer.
"""
from __future__ import annotations

import functools
from contextlib import contextmanager

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

import aws
from comments.table.direct import DirectReads
from pagination_index import SourceUnavailable


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


def _client(service: str, use: str, *, read_timeout: float | None = None, attempts: int | None = None):
    """A client of the comments table's endpoint and region. A dead DynamoDB must become a 503 within
    seconds on the page path: about attempts x (connect or read timeout) at worst."""
    config = settings.DYNAMODB
    return aws.client(service, use, region=config["REGION"], endpoint_url=config.get("ENDPOINT_URL"),
                      connect_timeout=config["CONNECT_TIMEOUT"], read_timeout=read_timeout or config["READ_TIMEOUT"],
                      attempts=attempts)


@functools.cache
def dynamodb():
    """Page requests and posts: fail fast within DYNAMODB_MAX_ATTEMPTS."""
    return _client("dynamodb", aws.PAGE)


@functools.cache
def dynamodb_reads() -> DirectReads:
    """The page path's Query (comments/table/direct.py) on dynamodb()'s endpoint, credentials,
    timeouts and attempt budget."""
    config = settings.DYNAMODB

    return DirectReads(dynamodb(), aws.credentials(config.get("ENDPOINT_URL")), attempts=config["MAX_ATTEMPTS"],
                       verify=aws.verify(), tag_requests=bool(config.get("ENDPOINT_URL")))


@functools.cache
def dynamodb_bulk():
    """Commands that read or write whole partitions or the whole table (rebuild_index, verify_index,
    backfill_rating_keys): a patient read timeout and adaptive retries, so a throttling burst slows
    them down instead of aborting hours of work."""
    return _client("dynamodb", aws.BULK, read_timeout=settings.DYNAMODB["BULK_READ_TIMEOUT"])


@functools.cache
def dynamodb_probe():
    """A DynamoDB client for /readyz: it fails within seconds instead of retrying."""
    config = settings.DYNAMODB
    return aws.client("dynamodb", aws.PROBE, region=config["REGION"], endpoint_url=config.get("ENDPOINT_URL"),
                      connect_timeout=1, read_timeout=2)


@functools.cache
def dynamodbstreams():
    """The stream's reader (sync_index, the Lambda handler's helpers): background retries."""
    return _client("dynamodbstreams", aws.BACKGROUND)


def reset_clients() -> None:
    aws.reset()
    dynamodb.cache_clear()
    dynamodb_reads.cache_clear()
    dynamodb_bulk.cache_clear()
    dynamodb_probe.cache_clear()
    dynamodbstreams.cache_clear()

