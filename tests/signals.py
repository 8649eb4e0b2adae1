"""What Django's own test signals (django/test/signals.py) do for CACHES and DATABASES, for the
objects this project makes once from settings: override_settings() of the settings they are made
from resets them. Test-support code only; the tests (conftest) and benchmarks that override these
settings import it, so no production module listens for setting changes."""
from django.core.signals import setting_changed
from django.dispatch import receiver

from comments.table.client import reset_clients
from pagination_index import reset_index

INDEX_SETTINGS = {"PAGINATION_INDEX", "PAGINATION_INDEX_SOURCE", "CACHES", "DATABASES"}


@receiver(setting_changed)
def reset_made_from_settings(*, setting, **kwargs):
    if setting in INDEX_SETTINGS:
        reset_index()
    if setting in ("DYNAMODB", "AWS"):
        reset_clients()
