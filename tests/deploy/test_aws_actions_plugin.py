"""The AWS-actions plugin checks the calls of the whole run when pytest-xdist runs it (as `make test`
does): each worker's calls reach the controller, which writes the record and fails the run on a call
no role grants. Without this, the controller saw no calls and checked nothing."""
import json
import os
import subprocess
import sys

from tests.deploy.aws_actions import ROOT


def test_calls_made_in_xdist_workers_reach_the_record(tmp_path):
    artifact = tmp_path / "aws-actions.json"
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}  # not this run's worker
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1",
         "tests/deploy/test_roles.py", "-k", "relational"],
        cwd=ROOT, env={**env, "AWS_ACTIONS_ARTIFACT": str(artifact)}, capture_output=True, text=True,
        timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    record = json.loads(artifact.read_text())
    components = {call["component"] for call in record["calls"]}
    assert {"web", "stream", "operator"} <= components, components
    assert record["ungranted"] == []
