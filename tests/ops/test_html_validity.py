"""The Nu HTML Checker (npm `vnu-jar`, installed by `make setup-dev` into .vnu/, run with the Java
DynamoDB Local needs) over the pages people and crawlers meet: the catalogue, a product's page 1, a
deep page served through the index, a filtered page, a cursor page, the comment form shown again with
its errors, the 404 and the 405 pages. One JVM start checks them all (with a canary page of known
errors, so a checker that read nothing cannot pass); any error fails the test.
Under CI=true a missing vnu.jar or java is a failure."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from django.core.management import call_command
from django.test import Client

from stack.dynamodb_local import ROOT
from tests import factories
from tests.comments.test_posting import _clean_rate_limit  # noqa: F401 (autouse)
from tests.conftest import service_missing

VNU_JAR = ROOT / ".vnu" / "node_modules" / "vnu-jar" / "build" / "dist" / "vnu.jar"
SKU = "VALID-1"
TOTAL = 260  # 13 pages: page 12 is past the first ten, so it comes through the index


@pytest.fixture
def vnu() -> list[str]:
    java = shutil.which("java")
    if not java:
        service_missing("java is not installed (Debian: apt-get install openjdk-17-jre-headless)")
    if not VNU_JAR.is_file():
        service_missing(f"the Nu HTML Checker is not installed at {VNU_JAR.relative_to(ROOT)}: run `make setup-dev`")
    return [java, "-Xss2m", "-jar", str(VNU_JAR)]


@pytest.fixture
def product(db, comments_table):
    factories.seed(SKU, TOTAL, seed=16, rating_weights=[1, 1, 2, 3, 5])
    product = factories.product(SKU, "Valid & well-formed kettle")
    call_command("rebuild_index", group=[SKU], verbosity=0)
    return product


def pages(client: Client) -> dict[str, tuple[int, bytes]]:
    """name -> (status, HTML) for every page the checker reads."""
    base = f"/products/{SKU}/"
    got = {name: client.get(url) for name, url in [
        ("catalogue", "/"),
        ("page-1", base),
        ("page-12", base + "?page=12"),
        ("filtered", base + "?rating=4&rating=5&page=2"),
        ("not-found", base + "?page=999"),
    ]}
    assert got["page-12"].context_data["page_obj"].served_by == "index"
    more = got["filtered"].context_data["more_url"]
    got["cursor"] = client.get(more)
    got["form-errors"] = client.post(base + "comments/", {"author": "<b>Ann</b>", "rating": "9", "body": ""},
                                     headers={"Origin": "http://testserver"})
    got["not-allowed"] = client.post(base)
    return {name: (response.status_code, response.content) for name, response in got.items()}


def test_pages_have_no_html_errors(vnu, product, tmp_path):
    client = Client()
    rendered = pages(client)
    assert {name: status for name, (status, _) in rendered.items()} == {
        "catalogue": 200, "page-1": 200, "page-12": 200, "filtered": 200, "not-found": 404,
        "cursor": 200, "form-errors": 400, "not-allowed": 405,
    }
    files = []
    for name, (_, html) in rendered.items():
        path = tmp_path / f"{name}.html"
        path.write_bytes(html)
        files.append(str(path))
    # A page with a known error in the same run proves the checker read the files and reports errors.
    canary = tmp_path / "canary.html"
    canary.write_text('<!doctype html><html lang="en"><title>Canary</title><p><li>not in a list</li></p></html>')
    files.append(str(canary))
    result = subprocess.run([*vnu, "--format", "json", "--errors-only", *files],
                            capture_output=True, text=True, timeout=600)
    try:
        messages = json.loads(result.stderr or result.stdout)["messages"]
    except (ValueError, KeyError):
        pytest.fail(f"the Nu HTML Checker gave no JSON report (exit {result.returncode}):\n"
                    f"{result.stdout}\n{result.stderr}", pytrace=False)
    where = [m.get("url", "?").rsplit("/", 1)[-1] for m in messages]
    assert "canary.html" in where, f"the checker missed the canary's error: {result.stderr}"
    errors = [f"{page}:{m.get('lastLine', '?')}: {m.get('type')}: {m.get('message')}\n    {m.get('extract', '').strip()}"
              for page, m in zip(where, messages) if page != "canary.html"]
    assert not errors, "\n".join(errors)
