"""What Django's own test signals (django/test/signals.py) do for CACHES and DATABASES, for the
objects the pagination index makes once from settings (the library resets them itself when
PAGINATION_INDEX changes: pagination_index.conf). Test-support code only; the tests (conftest) and
benchmarks that override these settings import it."""
from django.core.signals import setting_changed
from django.dispatch import receiver

from comments.table.client import reset_clients
from pagination_index import reset

INDEX_SETTINGS = {"CACHES", "DATABASES"}


@receiver(setting_changed)
def reset_made_from_settings(*, setting, **kwargs):
    if setting in INDEX_SETTINGS:
        reset()
    if setting == "PAGINATION_INDEX":
        reset_clients()  # the shop's own probe client
