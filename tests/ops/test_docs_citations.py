"""README.md and docs/ cite only what exists: files and folders of the repository (links and
`path/like/this`), management commands, `python -m` modules, make targets, and settings and
environment variables the code reads. A rename that leaves a doc behind fails here."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parents[2]
# The user docs; the lab notes beside the benchmarks (bench/notes/) are history, citing code as it was.
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TOP = {path.name for path in ROOT.iterdir() if not path.name.startswith(".")}
# Made by runs, not kept in the repository (.gitignore): cited as where output goes.
MADE = ("bench/.data", "test-artifacts", "var", "staticfiles")
CODE = "\n".join(path.read_text() for folder in ("pagination_index", "comments", "shop", "moderation", "ops", "metrics",
                                                 "stack", "bench", "deploy", "tests")
                 for path in (ROOT / folder).rglob("*.py"))
CODE += "".join((ROOT / name).read_text() for name in ("gunicorn.conf.py", "docker-compose.yml", "Makefile"))
CODE += "".join(path.read_text() for path in (ROOT / "deploy").rglob("*") if path.is_file() and path.suffix in
                {".yaml", ".yml", ".template", ".conf", ".json"})
# Setting and environment names the project's own docs may cite: ours (prefixes) beside AWS's and tools'.
PREFIXES = ("PAGINATION_INDEX", "COMMENTS_", "SYNC_INDEX_", "DYNAMODB_", "DJANGO_", "GUNICORN_", "MODERATION_",
            "RESPONSE_", "CACHE_", "LOG_", "SHOP_", "REBUILD_", "LAG_", "OPS_", "CATALOGUE_", "SITEMAP_", "METRICS_",
            "RETRY_", "DATABASE_", "REDIS_", "TEST_", "BENCH_", "STRICT_", "WEB_ADDRESS", "LAMBDA_", "LIGHTHOUSE_")
# Settings a release removed, named as such where the upgrading guide says what replaced them.
REMOVED = {"docs/library/upgrading.md": {"PAGINATION_INDEX_SOURCE"}}
# Read by the tools themselves, not by our code: Django's `createsuperuser --no-input`.
THEIRS = {"DJANGO_SUPERUSER_PASSWORD"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
TICKED = re.compile(r"`([^`\n]+)`")


def cited(pattern, text):
    return {match.group(1) for match in pattern.finditer(text)}


def doc_ids():
    return [str(path.relative_to(ROOT)) for path in DOCS]


@pytest.fixture(scope="module")
def make_targets():
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, re.M))


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids())
def test_links_and_paths_exist(doc):
    text = doc.read_text()
    missing = []
    for target in cited(LINK, text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        if not path.exists():
            missing.append(f"link {target}")
    for ticked in cited(TICKED, text):
        candidate = ticked.split()[0].rstrip(",.:;)")
        if ("/" not in candidate or candidate.split("/")[0] not in TOP | {"test-artifacts", "var"}
                or re.search(r"[<>*{}$|\[\]]", candidate) or candidate.endswith("/...") or candidate.startswith(MADE)):
            continue
        path = ROOT / candidate.split(":")[0].split("#")[0]
        if not path.exists():
            missing.append(f"path {candidate}")
    assert not missing, f"{doc.relative_to(ROOT)} cites what does not exist: {sorted(missing)}"


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids())
def test_commands_and_targets_exist(doc, make_targets):
    text = doc.read_text()
    commands = get_commands()
    missing = []
    for name in set(re.findall(r"manage\.py ([a-z_]+)", text)):
        if name not in commands:
            missing.append(f"manage.py {name}")
    for module in set(re.findall(r"python -m ([a-z_][\w.]*)", text)):
        if importlib.util.find_spec(module) is None:
            missing.append(f"python -m {module}")
    for target in set(re.findall(r"`make ([a-z][\w-]*)", text)):
        if target not in make_targets:
            missing.append(f"make {target}")
    assert not missing, f"{doc.relative_to(ROOT)} cites what does not exist: {sorted(missing)}"


@pytest.mark.parametrize("doc", DOCS, ids=doc_ids())
def test_settings_are_read_by_the_code(doc):
    missing = []
    removed = REMOVED.get(str(doc.relative_to(ROOT)), set())
    for ticked in cited(TICKED, doc.read_text()):
        for name in re.findall(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b", ticked):
            if name.startswith(PREFIXES) and name not in CODE and name not in THEIRS and name not in removed:
                missing.append(name)
    assert not missing, f"{doc.relative_to(ROOT)} names settings nothing reads: {sorted(set(missing))}"
