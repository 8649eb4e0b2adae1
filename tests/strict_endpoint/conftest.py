"""The endpoint as each test here starts it: reset to its start-up settings (meter and request log
empty), tables ACTIVE at once unless a test says otherwise. One table per module: tests use keys of
their own in it."""
from __future__ import annotations

import uuid

import pytest

from tests.strict_endpoint.helpers import client, create_table


@pytest.fixture
def strict(strict_endpoint, table):
    strict_endpoint.reset()
    strict_endpoint.configure(creating_seconds=0)
    yield strict_endpoint
    strict_endpoint.reset()


@pytest.fixture
def ddb(strict):
    return client(strict)


@pytest.fixture(scope="module")
def table(strict_endpoint):
    """Keyed PK/SK, GSIs byG (G, SK; projection ALL) and byK (K; KEYS_ONLY)."""
    strict_endpoint.reset()
    strict_endpoint.configure(creating_seconds=0)
    maker = client(strict_endpoint)
    name = f"strict-{uuid.uuid4().hex[:10]}"
    create_table(maker, name, indexes={"byG": ("G", "SK", "ALL"), "byK": ("K", None, "KEYS_ONLY")})
    yield name
    strict_endpoint.reset()  # no fault or policy of a test's in the way
    maker.delete_table(TableName=name)


@pytest.fixture
def uid() -> str:
    """A prefix for the keys of one test."""
    return uuid.uuid4().hex[:8]
