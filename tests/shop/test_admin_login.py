"""The admin's door (M6): staff passwords pass Django's validators, and wrong passwords are limited per
client address, counted in Django's cache (Redis: shared by every worker and host)."""
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.test import Client

LOGIN = "/admin/login/"


def test_weak_passwords_are_refused(db):
    for weak in ("a", "password123", "12345678901234", "mia-the-moderator"):
        with pytest.raises(ValidationError):
            validate_password(weak, user=get_user_model()(username="mia-the-moderator"))
    validate_password("correct horse battery staple")


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_user("ops", password="a long and good passphrase", is_staff=True)


def attempt(client, password):
    return client.post(LOGIN, {"username": "ops", "password": password, "next": "/admin/"})


@pytest.mark.parametrize("cache_backend", ["locmem", "redis"])
def test_wrong_passwords_are_limited_per_client(staff, settings, request, cache_backend):
    from tests.comments.test_posting import wait_for_fresh_minute

    if cache_backend == "redis":
        request.getfixturevalue("redis_cache")
    settings.ADMIN_LOGIN_FAILURES_PER_MINUTE = 3
    wait_for_fresh_minute()
    guesser = Client(REMOTE_ADDR="203.0.113.66")
    assert [attempt(guesser, f"guess {n}").status_code for n in range(3)] == [200, 200, 200]
    refused = attempt(guesser, "a long and good passphrase")  # even the right one: no password is checked
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 60
    assert "too many wrong passwords" in refused.content.decode()
    assert "_auth_user_id" not in guesser.session
    # Another address is not blocked by the guesser, and logs in.
    admin = Client(REMOTE_ADDR="198.51.100.20")
    assert attempt(admin, "a long and good passphrase").status_code == 302
    assert admin.get("/admin/").status_code == 200
    assert Client(REMOTE_ADDR="203.0.113.66").get(LOGIN).status_code == 200  # the form itself stays readable
