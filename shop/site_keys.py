"""The web's keys besides SECRET_KEY: COMMENTS_CURSOR_KEY signs cursors, MODERATION_REPORTER_KEY hashes
reporters' addresses. Each has fallbacks, tried after it (as Django's SECRET_KEY_FALLBACKS), so a key
can be rotated without breaking the cursors in people's tabs or forgetting who reported what.

SECRET_KEY is in every process (migrations, sync_index, the stream Lambda); these are only where
pages are served. The web refuses to start without them (shop/wsgi.py calls require_web_keys), and
`manage.py check --deploy` says so too; with DEBUG, settings derive both from SECRET_KEY."""
from __future__ import annotations

from django.conf import settings
from django.core import signing
from django.core.exceptions import ImproperlyConfigured
from django.utils.crypto import salted_hmac

KEYS = {
    "COMMENTS_CURSOR_KEY": "signs the comment pages' \"Load more\" cursors",
    "MODERATION_REPORTER_KEY": "keys the hashes of reporters' addresses",
}
MINIMUM_LENGTH = 32


def _key(name: str) -> str:
    key = getattr(settings, name)
    if not key:
        raise ImproperlyConfigured(missing_message([name]))
    return key


def cursor_signer(salt: str) -> signing.Signer:
    """A Signer with COMMENTS_CURSOR_KEY (never SECRET_KEY: an empty key would fall back to it)."""
    return signing.Signer(key=_key("COMMENTS_CURSOR_KEY"), fallback_keys=settings.COMMENTS_CURSOR_KEY_FALLBACKS,
                          salt=salt)


def reporter_hashes(address: str) -> list[str]:
    """The address's keyed hash under MODERATION_REPORTER_KEY, then under each fallback key."""
    keys = [_key("MODERATION_REPORTER_KEY"), *settings.MODERATION_REPORTER_KEY_FALLBACKS]
    return [salted_hmac("moderation.report.client", address, secret=key, algorithm="sha256").hexdigest()
            for key in keys]


def missing_keys() -> list[str]:
    return [name for name in KEYS if len(getattr(settings, name)) < MINIMUM_LENGTH]


def missing_message(names: list[str]) -> str:
    what = "; ".join(f"{name} {KEYS[name]}" for name in names)
    return (f"Set {' and '.join(names)}: {what}. Each is a long random string of its own (at least "
            f"{MINIMUM_LENGTH} characters, not DJANGO_SECRET_KEY), e.g. the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'` (docs/reference.md).")


def require_web_keys() -> None:
    """A web process without its keys stops at start-up, saying which, rather than failing pages later."""
    missing = missing_keys()
    if missing:
        raise ImproperlyConfigured(missing_message(missing))

