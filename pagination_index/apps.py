from django.apps import AppConfig


class PaginationIndexConfig(AppConfig):
    name = "pagination_index"
    verbose_name = "Pagination index"
    # The migrations' primary keys (0001): a project whose DEFAULT_AUTO_FIELD differs gets no new
    # migration and no models.W042.
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from pagination_index import checks  # noqa: F401  (registers the system checks)
