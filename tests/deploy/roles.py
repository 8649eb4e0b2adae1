"""Running a component with its role's key: the strict endpoint holds the deploy template's policies
for the principals "web", "stream" and "operator" (resolved for the test's table), and the process
environment carries the component's own access key, as an instance or task role would."""
from __future__ import annotations

from contextlib import contextmanager

import pytest

from comments.table.client import reset_clients
from deploy.aws.template import ROLES, role_policies
from pagination_index import reset as reset_index


def install_roles(endpoint, parameters: dict) -> dict[str, tuple[str, str]]:
    """The template's role policies for `parameters` on the endpoint; {component: (key id, secret)}."""
    keys = {}
    for component, documents in role_policies(parameters=parameters, account="123456789012").items():
        endpoint.set_policies(component, documents)
        keys[component] = endpoint.add_credentials(component)
    assert set(keys) == set(ROLES)
    return keys


@contextmanager
def as_component(keys: dict, component: str):
    key, secret = keys[component]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ACCESS_KEY_ID", key)
        patch.setenv("AWS_SECRET_ACCESS_KEY", secret)
        reset_clients()
        reset_index()
        try:
            yield
        finally:
            reset_clients()
            reset_index()
