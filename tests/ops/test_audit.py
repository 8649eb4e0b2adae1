"""`make audit` (deploy/audit.py) says what it checked, finds what an advisory database says is affected,
and never reports a clean result for a check it could not make (exit 2, "NOT done")."""
import io
import json

import pytest

from deploy import audit

CLEAN = "No known vulnerabilities"


def run(*args) -> tuple[int, str]:
    out = io.StringIO()
    return audit.main(list(map(str, args)), out=out), out.getvalue()


def test_the_shipped_snapshot_covers_every_locked_package_and_says_what_it_checked():
    status, text = run()
    snapshot = json.loads(audit.SNAPSHOT.read_text())
    packages = audit.locked_packages()
    assert set(packages) <= set(snapshot["packages"])  # else: refresh it (make lock added a package)
    assert f"Checked {len(packages)} packages pinned in requirements.lock, requirements-dev.lock" in text
    assert f"dated {snapshot['date']}" in text and snapshot["commit"][:12] in text
    assert status == (1 if "VULNERABLE" in text else 0) and (CLEAN in text) == (status == 0)


def test_old_pins_are_found_vulnerable(tmp_path):
    lock = tmp_path / "old.lock"
    lock.write_text("django==3.2.0 \\\n    --hash=sha256:00\njinja2==2.10\nurllib3==1.24.1\ngunicorn==27.0.1\n")
    status, text = run("--lock", lock)
    assert status == 1 and CLEAN not in text
    found = {line.split()[1].rstrip(":") for line in text.splitlines() if line.startswith("VULNERABLE")}
    assert found == {"django==3.2.0", "jinja2==2.10", "urllib3==1.24.1"}


@pytest.mark.parametrize("breakage", ["missing", "garbage", "empty database"])
def test_no_database_is_no_result(tmp_path, breakage):
    if breakage == "missing":
        args = ["--snapshot", tmp_path / "nothing.json"]
    elif breakage == "garbage":
        (tmp_path / "broken.json").write_text("{not json")
        args = ["--snapshot", tmp_path / "broken.json"]
    else:
        (tmp_path / "osv").mkdir()
        args = ["--database", tmp_path / "osv"]
    status, text = run(*args)
    assert status == 2 and text.startswith("Dependency audit NOT done") and CLEAN not in text


def test_a_package_the_snapshot_was_not_taken_for_is_not_reported_clean(tmp_path):
    lock = tmp_path / "new.lock"
    lock.write_text("django==5.2.19\nleft-pad==1.0\n")
    status, text = run("--lock", lock)
    assert status == 2 and "left-pad" in text and CLEAN not in text


def osv(identifier, name, *, events=(), versions=()):
    return {"id": identifier, "aliases": [f"CVE-{identifier}"], "summary": f"{identifier} in {name}",
            "affected": [{"package": {"ecosystem": "PyPI", "name": name}, "versions": list(versions),
                          "ranges": [{"type": "ECOSYSTEM", "events": list(events)}] if events else []}]}


def test_osv_ranges_and_versions(tmp_path):
    database = tmp_path / "osv"
    database.mkdir()
    records = [
        osv("A-1", "Demo_Pkg", events=[{"introduced": "0"}, {"fixed": "1.4"}]),
        osv("A-2", "demo-pkg", events=[{"introduced": "2.0"}, {"last_affected": "2.1"}]),
        osv("A-3", "demo.pkg", versions=["3.0rc1"]),
        {**osv("A-4", "demo-pkg", events=[{"introduced": "0"}]), "withdrawn": "2024-01-01T00:00:00Z"},
        osv("A-5", "other", events=[{"introduced": "0"}]),
    ]
    for record in records:
        (database / f"{record['id']}.json").write_text(json.dumps(record))
    for version, expected in [("1.3.9", {"A-1"}), ("1.4", set()), ("2.0", {"A-2"}), ("2.1", {"A-2"}),
                              ("2.1.1", set()), ("3.0rc1", {"A-3"})]:
        lock = tmp_path / "demo.lock"
        lock.write_text(f"demo-pkg=={version}\n")
        status, text = run("--database", database, "--lock", lock)
        ids = {line.split()[2] for line in text.splitlines() if line.startswith("VULNERABLE")}
        assert (status, ids) == (1 if expected else 0, expected), (version, text)
    # The snapshot written from it keeps the locked packages' advisories and says what it covers.
    snapshot_path = tmp_path / "snapshot.json"
    assert run("--update-snapshot", "--database", database, "--lock", lock, "--snapshot", snapshot_path)[0] == 0
    snapshot = json.loads(snapshot_path.read_text())
    assert snapshot["packages"] == ["demo-pkg"] and len(snapshot["advisories"]["demo-pkg"]) == 3
    assert run("--snapshot", snapshot_path, "--lock", lock)[0] == 1
