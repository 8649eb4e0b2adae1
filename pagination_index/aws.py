"""The one place that builds boto3 clients; table names come from settings.DYNAMODB.

Low-level clients (not the resource layer): they are thread-safe, and deserialising our few
attribute types by hand is several times cheaper than boto3's TypeDeserializer.
"""
from __future__ import annotations

import functools
import os

import boto3
from botocore.config import Config
from django.conf import settings
from django.core.signals import setting_changed

CLIENT_CONFIG = Config(
    connect_timeout=2,
    read_timeout=10,
    retries={"max_attempts": 4, "mode": "standard"},
    max_pool_connections=32,
)
# Health checks want a fast answer, not a patient one: one attempt, short timeouts.
PROBE_CONFIG = Config(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1, "mode": "standard"})


def _client_kwargs(client_config: Config = CLIENT_CONFIG) -> dict:
    config = settings.DYNAMODB
    kwargs = {"region_name": config["REGION"], "config": client_config}
    if config.get("ENDPOINT_URL"):
        kwargs["endpoint_url"] = config["ENDPOINT_URL"]
        # DynamoDB Local accepts any credentials; don't make developers configure fake ones.
        if not (os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")):
            kwargs["aws_access_key_id"] = "local"
            kwargs["aws_secret_access_key"] = "local"
    return kwargs


@functools.cache
def dynamodb():
    return boto3.session.Session().client("dynamodb", **_client_kwargs())


@functools.cache
def dynamodb_probe():
    """A DynamoDB client for /readyz: it fails within seconds instead of retrying."""
    return boto3.session.Session().client("dynamodb", **_client_kwargs(PROBE_CONFIG))


@functools.cache
def dynamodbstreams():
    return boto3.session.Session().client("dynamodbstreams", **_client_kwargs())


def table_name() -> str:
    return settings.DYNAMODB["TABLE"]


def product_index_name() -> str:
    return settings.DYNAMODB["GSI"]


def rating_index_name() -> str:
    return settings.DYNAMODB["RATING_GSI"]


def reset_clients() -> None:
    dynamodb.cache_clear()
    dynamodb_probe.cache_clear()
    dynamodbstreams.cache_clear()


def _on_setting_changed(*, setting, **kwargs):
    if setting == "DYNAMODB":
        reset_clients()


setting_changed.connect(_on_setting_changed)
