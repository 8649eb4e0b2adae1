"""Clients of the strict endpoint for its own tests: botocore as the site uses it, one attempt each
(so an injected fault reaches the test as the error it is), unless `attempts` says otherwise."""
from __future__ import annotations

import boto3
import botocore.session
from botocore.config import Config


def client(endpoint, service: str = "dynamodb", *, key: str | None = None, secret: str | None = None,
           token: str | None = None, attempts: int = 1, session=None, **config):
    """A boto3 client of `endpoint` that trusts its CA; the endpoint's default credentials unless
    `key`/`secret` (and `token`) are given or `session` (a botocore session) supplies its own."""
    kwargs = {"endpoint_url": endpoint.url, "region_name": endpoint.region, "verify": endpoint.ca_bundle,
              "config": Config(retries={"total_max_attempts": attempts, "mode": "standard"}, **config)}
    if session is None:
        kwargs.update(aws_access_key_id=key or endpoint.access_key_id,
                      aws_secret_access_key=secret or endpoint.secret_access_key, aws_session_token=token)
        return boto3.session.Session().client(service, **kwargs)
    return boto3.session.Session(botocore_session=session).client(service, **kwargs)


def error_code(excinfo) -> str:
    return excinfo.value.response["Error"]["Code"]


def fresh_botocore_session() -> botocore.session.Session:
    return botocore.session.Session()
