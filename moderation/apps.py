from django.apps import AppConfig
from django.core import checks


class ModerationConfig(AppConfig):
    name = "moderation"
    verbose_name = "Moderation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        checks.register(check_purge_hook)


def check_purge_hook(app_configs=None, **kwargs):
    """A mistyped MODERATION_PURGE_HOOK would only show as a logged failure after a moderator's action."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    path = settings.MODERATION_PURGE_HOOK
    if not path:
        return []
    try:
        hook = import_string(path)
    except ImportError as exc:
        return [checks.Error(f"MODERATION_PURGE_HOOK {path!r} cannot be imported: {exc}",
                             hint="Name a callable purge(*, keys, paths) by its dotted path, e.g. "
                                  "moderation.purge.webhook.", id="moderation.E001")]
    if not callable(hook):
        return [checks.Error(f"MODERATION_PURGE_HOOK {path!r} is not callable.", id="moderation.E001")]
    if path == "moderation.purge.webhook" and not settings.MODERATION_PURGE_WEBHOOK_URL:
        return [checks.Error("MODERATION_PURGE_HOOK is the webhook, but MODERATION_PURGE_WEBHOOK_URL is empty.",
                             hint="Set MODERATION_PURGE_WEBHOOK_URL to the URL that purges your CDN.",
                             id="moderation.E002")]
    return []
