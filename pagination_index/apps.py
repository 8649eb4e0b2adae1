from django.apps import AppConfig


class PaginationIndexConfig(AppConfig):
    name = "pagination_index"
    verbose_name = "Pagination index"

    def ready(self):
        from pagination_index import checks  # noqa: F401  (registers the system checks)
