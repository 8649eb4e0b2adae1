"""The library as an adopter meets it: `pip wheel --no-deps .` gives one wheel of `pagination_index`
alone; installed into a fresh venv beside Django, boto3 and DRF only, it brings no Redis, PostgreSQL
or numpy client; a `django-admin startproject` project with the quick start's settings
(docs/library/quickstart.md) passes `check`, migrates, needs no new migration, and serves every page
of Django's Paginator and DRF's PageNumberPagination equal to a full Query's slice, for a GSI with a
number sort key and a single-table partition filtered by begins_with, newest and oldest first, after
rebuild_index and after changes applied by sync_index --once (tests/library/scenario.py); and
verify_index is clean. DynamoDB Local is the table store; nothing in the project is of the shop."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs/library/quickstart.md"
FORBIDDEN = {"redis", "django-redis", "psycopg", "psycopg-binary", "numpy", "hiredis"}


def locked(name: str, lock: str = "requirements.lock") -> str:
    found = re.search(rf"^{re.escape(name)}==(\S+)", (ROOT / lock).read_text(), re.M | re.I)
    assert found, f"{name} is not in {lock}"
    return f"{name}=={found.group(1)}"


def doc_blocks() -> dict[str, str]:
    """The quick start's code blocks marked `<!-- test: name -->`, by name."""
    text = QUICKSTART.read_text()
    return {name: code for name, code in re.findall(r"<!-- test: (\w+) -->\s*```python\n(.*?)```", text, re.S)}


def run(command, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(folder), str(ROOT)],
        cwd=tmp_path_factory.mktemp("build-cwd"))
    [built] = folder.glob("*.whl")
    return built


def test_the_wheel_holds_the_library_alone(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    packages = {name.split("/")[0] for name in names}
    assert packages == {"pagination_index", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    assert "pagination_index/py.typed" in names
    assert "pagination_index/migrations/0001_initial.py" in names
    # The extras: the DRF pagination class, the pager tag and its template (package-data).
    for extra in ("contrib/drf.py", "paginator.py", "templatetags/pagination_index.py", "templates/pagination_index/pager.html"):
        assert f"pagination_index/{extra}" in names, extra
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "License-File: LICENSE" in metadata or "License" in metadata
    assert re.search(r"^Requires-Dist: Django", metadata, re.M) and re.search(r"^Requires-Dist: boto3", metadata, re.M)
    core = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert len(core) == 2, core


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv with the wheel and no extra: Django, boto3 and DRF only."""
    folder = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", str(folder)])
    python = folder / "bin/python"
    run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", locked("Django"),
         locked("boto3"), locked("djangorestframework", "requirements-dev.lock"), str(wheel)])
    return folder


def test_a_fresh_install_brings_no_store_client(venv):
    listed = json.loads(run([str(venv / "bin/python"), "-m", "pip", "list", "--format", "json"]).stdout)
    installed = {package["name"].lower() for package in listed}
    assert "django-pagination-index" in installed
    assert not installed & FORBIDDEN, installed & FORBIDDEN


@pytest.fixture(scope="module")
def project(venv, tmp_path_factory):
    """`django-admin startproject eventsite`, with the quick start's settings block appended."""
    folder = tmp_path_factory.mktemp("project")
    run([str(venv / "bin/django-admin"), "startproject", "eventsite", str(folder)])
    settings = folder / "eventsite/settings.py"
    settings.write_text(settings.read_text() + "\n" + doc_blocks()["settings"])
    return folder


def manage(venv, project, *args, env):
    return run([str(venv / "bin/python"), "manage.py", *args], cwd=project, env=env)


def test_the_quick_start_serves_every_page_equal_to_a_full_query(venv, project, dynamodb_local):
    env = {"PATH": os.environ["PATH"], "HOME": str(project), "DJANGO_SETTINGS_MODULE": "eventsite.settings",
           # boto3's own configuration, as an adopter points any AWS SDK at DynamoDB Local
           "AWS_ENDPOINT_URL": dynamodb_local.endpoint_url, "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
           "QUICKSTART_BLOCKS": json.dumps(doc_blocks()), "PYTHONPATH": str(project)}
    assert manage(venv, project, "check", "--fail-level", "WARNING", env=env).returncode == 0
    manage(venv, project, "migrate", "--no-input", "-v", "0", env=env)
    manage(venv, project, "makemigrations", "--check", "--dry-run", env=env)
    assert "sync_index" in manage(venv, project, "help", env=env).stdout
    manage(venv, project, "sync_index", "--help", env=env)
    done = run([str(venv / "bin/python"), str(ROOT / "tests/library/scenario.py")], cwd=project, env=env)
    checked = json.loads(done.stdout.strip().splitlines()[-1])
    # Every page of every group compared, and the extras used as installed.
    assert checked["pages"] >= 200 and checked["drf_pages"] >= 50 and checked["extras"], checked
