"""The web's own keys (shop/site_keys.py): a web process without them does not start, `check --deploy`
names them, processes that serve no page (migrations, sync_index, the Lambda) need none, and DEBUG
derives them. Checked in fresh processes, as a server starts."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE = {"DJANGO_SECRET_KEY": "site-keys-test-only-0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6",
        "DJANGO_SETTINGS_MODULE": "shop.settings", "CACHE_BACKEND": "redis"}
KEYS = {"COMMENTS_CURSOR_KEY": "site-keys-test-cursor-key-0123456789abcdef",
        "MODERATION_REPORTER_KEY": "site-keys-test-reporter-key-0123456789abcdef"}


def run(*args, env):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=60)


def test_a_web_process_without_its_keys_stops_at_start_up_naming_them():
    result = run("-c", "import shop.wsgi", env=BASE)
    assert result.returncode != 0
    assert "Set COMMENTS_CURSOR_KEY and MODERATION_REPORTER_KEY" in result.stderr
    only_one = run("-c", "import shop.wsgi", env={**BASE, "COMMENTS_CURSOR_KEY": KEYS["COMMENTS_CURSOR_KEY"]})
    assert only_one.returncode != 0 and "Set MODERATION_REPORTER_KEY:" in only_one.stderr
    assert run("-c", "import shop.wsgi", env={**BASE, **KEYS}).returncode == 0


def test_check_deploy_names_missing_keys_and_other_processes_need_none():
    deploy = run("manage.py", "check", "--deploy", env=BASE)
    assert deploy.returncode != 0 and "shop.E001" in deploy.stderr
    short = run("manage.py", "check", "--deploy", env={**BASE, **KEYS, "COMMENTS_CURSOR_KEY": "too-short"})
    assert short.returncode != 0 and "shop.E001" in short.stderr
    assert run("manage.py", "check", env=BASE).returncode == 0  # migrate, sync_index: no key needed


def test_debug_derives_distinct_keys_from_the_secret_key():
    code = ("from django.conf import settings as s; "
            "print(len(s.COMMENTS_CURSOR_KEY), s.COMMENTS_CURSOR_KEY != s.MODERATION_REPORTER_KEY, "
            "s.SECRET_KEY not in (s.COMMENTS_CURSOR_KEY, s.MODERATION_REPORTER_KEY))")
    result = run("manage.py", "shell", "-c", code, env={"DJANGO_SETTINGS_MODULE": "shop.settings", "DJANGO_DEBUG": "1"})
    assert result.stdout.strip().splitlines()[-1].split() == ["64", "True", "True"], result.stderr
    assert run("manage.py", "shell", "-c", "import shop.wsgi",
               env={"DJANGO_SETTINGS_MODULE": "shop.settings", "DJANGO_DEBUG": "1"}).returncode == 0
