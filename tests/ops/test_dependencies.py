"""The hash locks (requirements.lock, requirements-dev.lock) match their inputs (requirements*.txt) and the
environment the tests run in: an edited requirements.txt without `make lock` fails here."""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """`name==version` lines of a requirements file, following its `-r` includes."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("-r "):
            found.update(pins(path.parent / line[3:].strip()))
        elif match := PIN.match(line):
            found[normalized(match[1])] = match[2]
    return found


def locked(path: Path) -> dict[str, tuple[str, int]]:
    """Each locked package: its version and how many hashes it carries."""
    found, current = {}, None
    for line in path.read_text().splitlines():
        if match := PIN.match(line):
            current = normalized(match[1])
            found[current] = (match[2], 0)
        elif line.strip().startswith("--hash=sha256:") and current:
            version, hashes = found[current]
            found[current] = (version, hashes + 1)
    return found


@pytest.mark.parametrize("source,lock", [("requirements.txt", "requirements.lock"),
                                         ("requirements-dev.txt", "requirements-dev.lock")])
def test_every_pin_is_locked_at_its_version_with_hashes(source, lock):
    wanted, have = pins(ROOT / source), locked(ROOT / lock)
    stale = {name: (version, have.get(name, ("missing", 0))[0]) for name, version in wanted.items()
             if have.get(name, (None, 0))[0] != version}
    assert not stale, f"{lock} is out of date with {source} (run `make lock`): {stale}"
    assert all(hashes for _, hashes in have.values()), f"{lock} has packages without a hash"


def test_botocore_is_pinned_and_the_dev_lock_keeps_the_runtime_versions():
    assert "botocore" in pins(ROOT / "requirements.txt")  # comments/table/client.py subclasses its parser
    runtime, dev = locked(ROOT / "requirements.lock"), locked(ROOT / "requirements-dev.lock")
    assert {name: dev.get(name, ("missing",))[0] for name in runtime} == {name: v for name, (v, _) in runtime.items()}


def test_the_tests_run_on_the_locked_versions():
    """The guard tests (docs/operations.md, "Upgrading dependencies") prove only the versions installed."""
    drift = {}
    for name, (version, _) in locked(ROOT / "requirements-dev.lock").items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = "missing"
        if installed != version:
            drift[name] = (version, installed)
    assert not drift, f"installed packages differ from requirements-dev.lock (run `make setup-dev`): {drift}"
