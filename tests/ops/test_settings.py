"""Production settings come from the environment only: checked in fresh processes, as a server starts."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "DJANGO_SECRET_KEY": "k3Vq9-pZ2xR7mT4wL8nB1cY6hJ0sD5fG2aQ9eU3iO7rK4vN1xW8m",
    "DJANGO_ALLOWED_HOSTS": "shop.example.com",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://shop.example.com",
    "DJANGO_HTTPS": "1",
    "DJANGO_HSTS_PRELOAD": "1",
    "COMMENTS_CURSOR_KEY": "pV7xN2qL9sT4wZ1kR8mB3cY6hJ0dF5gA",
    "MODERATION_REPORTER_KEY": "Qe4Tz8Uw1Xy5Vb9Nc2Md6Lf0Kg3Jh7Hs",
    "CACHE_BACKEND": "redis",
}


def manage(*args, env):
    """manage.py with shop.settings and only the given variables (plus PATH): what a server sees."""
    clean = {"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "shop.settings", **env}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=clean,
                          capture_output=True, text=True, timeout=60)


def test_check_deploy_passes_with_production_settings():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_check_deploy_warns_about_a_per_process_cache():
    """L5/M1: rate limits and moderation's invalidations live in the default cache."""
    env = {key: value for key, value in PRODUCTION.items() if key != "CACHE_BACKEND"}
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode != 0 and "shop.W001" in result.stderr


def test_check_deploy_warns_without_https():
    env = {key: value for key, value in PRODUCTION.items() if key not in {"DJANGO_HTTPS", "DJANGO_HSTS_PRELOAD"}}
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode != 0
    assert "security.W004" in result.stderr  # no HSTS: the check is not a formality


def test_missing_secret_key_stops_start_up_with_a_clear_message():
    env = {key: value for key, value in PRODUCTION.items() if key != "DJANGO_SECRET_KEY"}
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr
    assert "Traceback" not in result.stdout


def test_debug_runs_without_a_secret_key():
    result = manage("check", env={"DJANGO_DEBUG": "1"})
    assert result.returncode == 0, result.stderr


def test_https_settings():
    code = ("from django.conf import settings as s; "
            "print(s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, "
            "s.SECURE_PROXY_SSL_HEADER, s.CSRF_TRUSTED_ORIGINS, s.DEBUG)")
    result = manage("shell", "-c", code, env=PRODUCTION)
    assert result.stdout.strip().splitlines()[-1] == (
        "True True True 31536000 ('HTTP_X_FORWARDED_PROTO', 'https') ['https://shop.example.com'] False")


def environment_variables_read(path: Path) -> set[str]:
    return set(re.findall(r'(?:os\.environ\.get|env_bool|env_list|env_secret)\(\s*"([A-Z0-9_]+)"', path.read_text()))


def documented_variables() -> set[str]:
    """The first column of the table under "## Settings" in docs/reference.md."""
    text = (ROOT / "docs" / "reference.md").read_text()
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Z0-9_]+)` \|", section, flags=re.M))


def test_every_setting_read_from_the_environment_is_documented_and_nothing_else():
    read = environment_variables_read(ROOT / "shop" / "settings.py") | environment_variables_read(
        ROOT / "gunicorn.conf.py")
    documented = documented_variables()
    assert read - documented == set(), "read but not in docs/reference.md"
    assert documented - read == set(), "in docs/reference.md but read nowhere"
