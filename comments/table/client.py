"""The comments table's clients: the pagination index's (one client layer, pagination_index/aws/,
on settings.PAGINATION_INDEX["AWS"]), and the one place that says what a DynamoDB failure is to the
rest of the site: StoreUnavailable, the library's SourceUnavailable (a 503, never a 500:
shop.middleware.ServiceUnavailableMiddleware)."""
from __future__ import annotations

import functools

from pagination_index import aws
from pagination_index.sources import SourceUnavailable, source_errors

StoreUnavailable = SourceUnavailable
store_errors = source_errors


def dynamodb():
    """Page requests and posts: fail fast within the AWS MAX_ATTEMPTS."""
    return aws.shared_client("dynamodb", aws.PAGE)


def dynamodb_bulk():
    """Commands that read or write whole partitions or the whole table (seeding, backfills): a
    patient read timeout and adaptive retries."""
    return aws.shared_client("dynamodb", aws.BULK)


def dynamodb_reads():
    """The page path's Query (pagination_index/aws/direct.py)."""
    return aws.direct_reads()


@functools.cache
def dynamodb_probe():
    """A DynamoDB client for /readyz: it fails within seconds instead of retrying."""
    return aws.client("dynamodb", aws.PROBE, connect_timeout=1, read_timeout=2)


def dynamodbstreams():
    return aws.shared_client("dynamodbstreams", aws.BACKGROUND)


def reset_clients() -> None:
    aws.reset()
    dynamodb_probe.cache_clear()
