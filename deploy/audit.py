"""`make audit`: every package pinned in requirements.lock and requirements-dev.lock, checked against an
advisory database in OSV's format, saying what it checked: which database, of what date, how many
packages and advisories. It never answers "no known vulnerabilities" for a check it did not make.

    python -m deploy.audit                             # the snapshot in the repository (offline)
    python -m deploy.audit --database advisory-database/   # a checkout of github.com/pypa/advisory-database,
    python -m deploy.audit --database PyPI-all.zip     # or OSV's PyPI export (osv-vulnerabilities bucket)
    python -m deploy.audit --update-snapshot --database advisory-database/   # refresh the snapshot

Exit status: 0 when every locked package was checked and none is affected; 1 when one is; 2 when the
check could not be made (no database, an unreadable one, or a locked package the snapshot does not
cover: it was taken before that package was added). The snapshot
(deploy/advisories/pypi-advisories.json) holds the advisories of the locked packages only, with the
database's commit and date; refresh it (where the network allows) when the locks change, or the audit
says which packages it could not check. `pip-audit --strict -r requirements.lock` asks PyPI's own
advisory data instead, where PyPI's JSON API is reachable (without --strict, pip-audit skips packages
it cannot find and still prints "No known vulnerabilities found").
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
LOCKS = (ROOT / "requirements.lock", ROOT / "requirements-dev.lock")
SNAPSHOT = Path(__file__).resolve().parent / "advisories" / "pypi-advisories.json"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")
# Older than this, the report says plainly that newer advisories are unknown to it.
STALE_DAYS = 90


class AuditError(Exception):
    """The check could not be made: the message says why."""


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_packages(locks=LOCKS) -> dict[str, str]:
    """name -> version of every `name==version` line of the lock files."""
    found = {}
    for lock in locks:
        for line in lock.read_text().splitlines():
            if match := PIN.match(line.strip()):
                found[normalized(match[1])] = match[2]
    return found


# --- Reading an OSV database --------------------------------------------------------------------
def _records(database: Path):
    """Every OSV record of a folder (YAML or JSON files, as pypa/advisory-database and OSV's exports
    hold them) or of a zip of JSON files."""
    import yaml

    if database.is_file() and zipfile.is_zipfile(database):
        with zipfile.ZipFile(database) as archive:
            for name in archive.namelist():
                if name.endswith(".json"):
                    yield json.loads(archive.read(name))
        return
    if not database.is_dir():
        raise AuditError(f"no advisory database at {database}")
    for path in sorted(database.rglob("*")):
        if path.suffix in {".yaml", ".yml"}:
            yield yaml.safe_load(path.read_text())
        elif path.suffix == ".json":
            yield json.loads(path.read_text())


def _pypi_affected(record: dict) -> list[dict]:
    return [entry for entry in record.get("affected", [])
            if entry.get("package", {}).get("ecosystem") == "PyPI"]


def read_database(database: Path, packages) -> dict[str, list[dict]]:
    """The advisories affecting any of `packages`, by package, each kept as far as matching needs it."""
    wanted = set(packages)
    found: dict[str, list[dict]] = {name: [] for name in wanted}
    count = 0
    for record in _records(database):
        count += 1
        if not isinstance(record, dict) or record.get("withdrawn"):
            continue
        for entry in _pypi_affected(record):
            name = normalized(entry["package"]["name"])
            if name in wanted:
                found[name].append({
                    "id": record["id"], "aliases": record.get("aliases", []),
                    "summary": (record.get("summary") or record.get("details", "")).strip().splitlines()[0][:200]
                    if (record.get("summary") or record.get("details")) else "",
                    "ranges": [r for r in entry.get("ranges", []) if r.get("type") == "ECOSYSTEM"],
                    "versions": entry.get("versions", [])})
    if not count:
        raise AuditError(f"{database} holds no advisory")
    return found


# --- Matching -------------------------------------------------------------------------------------
def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def in_range(version: Version, events: list[dict]) -> bool:
    """OSV's ECOSYSTEM range: affected from each `introduced` ("0": from the first release) until the
    next `fixed` (excluded) or `last_affected` (included)."""
    affected = False
    for event in sorted(events, key=lambda e: _version(next(iter(e.values()))) or Version("0")):
        (kind, value), = event.items()
        bound = _version(value) if value != "0" else Version("0")
        if bound is None:
            continue
        if kind == "introduced" and version >= bound:
            affected = True
        elif kind == "fixed" and version >= bound:
            affected = False
        elif kind == "last_affected" and version > bound:
            affected = False
    return affected


def affects(advisory: dict, version_text: str) -> bool:
    if version_text in advisory["versions"]:
        return True
    version = _version(version_text)
    return version is not None and any(in_range(version, r.get("events", [])) for r in advisory["ranges"])


@dataclass
class Finding:
    package: str
    version: str
    advisory: dict


def audit(packages: dict[str, str], advisories: dict[str, list[dict]]) -> list[Finding]:
    return [Finding(name, version, advisory) for name, version in sorted(packages.items())
            for advisory in advisories.get(name, []) if affects(advisory, version)]


# --- The snapshot ---------------------------------------------------------------------------------
def database_date(database: Path) -> tuple[str, str]:
    """(commit, ISO date) of a git checkout's HEAD, else ("", the newest file's modification time)."""
    import subprocess

    if (database / ".git").exists():
        done = subprocess.run(["git", "-C", str(database), "log", "-1", "--format=%H %cI"], capture_output=True,
                              text=True)
        if done.returncode == 0:
            commit, date = done.stdout.split()
            return commit, date
    newest = max((path.stat().st_mtime for path in ([database] if database.is_file() else database.rglob("*"))),
                 default=0)
    return "", datetime.fromtimestamp(newest, timezone.utc).isoformat(timespec="seconds")


def write_snapshot(database: Path, packages: dict[str, str], path: Path = SNAPSHOT) -> dict:
    advisories = read_database(database, packages)
    commit, date = database_date(database)
    snapshot = {
        "source": "PyPA advisory database (https://github.com/pypa/advisory-database, CC-BY 4.0) or an OSV "
                  "export of PyPI, as read by `python -m deploy.audit --update-snapshot`",
        "commit": commit, "date": date,
        "packages": sorted(packages),  # what it was taken for: a package added since is not covered
        "advisories": {name: found for name, found in sorted(advisories.items()) if found},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    return snapshot


def load_snapshot(path: Path = SNAPSHOT) -> dict:
    try:
        snapshot = json.loads(path.read_text())
        snapshot["packages"], snapshot["advisories"], snapshot["date"]  # noqa: B018 (the fields it needs)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AuditError(f"the advisory snapshot {path} cannot be read: {exc}") from exc
    return snapshot


# --- The command ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None, out=sys.stdout) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", type=Path, help="an OSV database: a folder of records (pypa/advisory-database) "
                                                      "or OSV's PyPI zip; default: the repository's snapshot")
    parser.add_argument("--update-snapshot", action="store_true",
                        help="rewrite deploy/advisories/pypi-advisories.json from --database for the locked packages")
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT, help=argparse.SUPPRESS)
    parser.add_argument("--lock", type=Path, action="append", help="lock files (default: both of the repository's)")
    args = parser.parse_args(argv)
    locks = args.lock or list(LOCKS)
    packages = locked_packages(locks)
    try:
        if args.update_snapshot:
            if not args.database:
                parser.error("--update-snapshot reads --database")
            snapshot = write_snapshot(args.database, packages, args.snapshot)
            print(f"wrote {args.snapshot}: {sum(map(len, snapshot['advisories'].values()))} advisories for "
                  f"{len(packages)} packages, database of {snapshot['date']}", file=out)
            return 0
        if args.database:
            advisories = read_database(args.database, packages)
            commit, date = database_date(args.database)
            source, covered = f"{args.database} ({commit[:12] or 'no commit'})", set(packages)
        else:
            snapshot = load_snapshot(args.snapshot)
            advisories, date, covered = snapshot["advisories"], snapshot["date"], set(snapshot["packages"])
            source = f"the repository's snapshot of {snapshot['commit'][:12] or 'an OSV export'}"
        missing = sorted(set(packages) - covered)
        if missing:
            raise AuditError(f"{len(missing)} locked packages are not covered by {source}: {', '.join(missing)} "
                             "(refresh it: python -m deploy.audit --update-snapshot --database ...)")
    except AuditError as exc:
        print(f"Dependency audit NOT done: {exc}", file=out)
        return 2
    findings = audit(packages, advisories)
    known = sum(len(advisories.get(name, [])) for name in packages)
    age = (datetime.now(timezone.utc) - datetime.fromisoformat(date)).days
    print(f"Checked {len(packages)} packages pinned in {', '.join(lock.name for lock in locks)} against "
          f"{known} advisories for them in {source}, dated {date} ({age} days ago).", file=out)
    if age > STALE_DAYS:
        print(f"Advisories published after {date[:10]} are unknown to this check: refresh the snapshot where "
              "the network allows (docs/operations.md, \"Dependency audit\").", file=out)
    for finding in findings:
        advisory = finding.advisory
        aliases = ", ".join(advisory["aliases"][:3])
        print(f"VULNERABLE {finding.package}=={finding.version}: {advisory['id']} ({aliases}) {advisory['summary']}",
              file=out)
    if findings:
        print(f"{len(findings)} known vulnerabilities in {len({f.package for f in findings})} packages.", file=out)
        return 1
    print(f"No known vulnerabilities in these {len(packages)} packages as of {date[:10]}.", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
