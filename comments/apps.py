from django.apps import AppConfig
from django.core import checks

PAGE_NUMBERINGS = ("newest", "stable")


class CommentsConfig(AppConfig):
    name = "comments"
    verbose_name = "Comments (DynamoDB)"

    def ready(self):
        checks.register(check_page_numbering)


def check_page_numbering(app_configs=None, **kwargs):
    """COMMENTS_PAGE_NUMBERING must name one of the numberings (a typo would silently serve "newest")."""
    from django.conf import settings

    value = getattr(settings, "COMMENTS_PAGE_NUMBERING", "newest")
    if value not in PAGE_NUMBERINGS:
        return [checks.Error(f"COMMENTS_PAGE_NUMBERING is {value!r}.", hint='Use "newest" or "stable".',
                             id="comments.E001")]
    return []
