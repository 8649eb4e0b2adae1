"""docs/deploy-aws.md can be followed as written: each `make` target exists, each `manage.py` command
parses its options, each `aws cloudformation deploy` names the template, only its parameters and all
the ones it requires, and the zip it uploads is the one `make lambda-package` writes."""
from __future__ import annotations

import re
import shlex

import pytest
from django.core.management import get_commands, load_command_class

from deploy.aws.template import TEMPLATE, load
from stack.dynamodb_local import ROOT

DOC = ROOT / "docs" / "deploy-aws.md"


def commands() -> list[str]:
    text = DOC.read_text()
    found = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        found += [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    found += re.findall(r"`(python manage\.py [^`]+)`", text)
    return found


def makefile_variable(name: str) -> str:
    return re.search(rf"^{name} \?= (.+)$", (ROOT / "Makefile").read_text(), flags=re.M)[1]


def check_make(words):
    assert re.search(rf"^{re.escape(words[1])}:", (ROOT / "Makefile").read_text(), flags=re.M), words


def check_manage(words):
    name, *arguments = words[2:]
    assert name in get_commands(), f"no manage.py {name}"
    load_command_class(get_commands()[name], name).create_parser("manage.py", name).parse_args(arguments)


def check_cloudformation_deploy(words):
    options, key = {}, None
    for word in words[3:]:
        if word.startswith("--"):
            key = word
            options[key] = []
        else:
            options[key].append(word)
    assert ROOT / options["--template-file"][0] == TEMPLATE
    assert options["--capabilities"] == ["CAPABILITY_IAM"]  # the roles have generated names
    parameters = load()["Parameters"]
    given = {item.split("=", 1)[0] for item in options["--parameter-overrides"]}
    assert given <= set(parameters), given - set(parameters)
    assert {name for name, spec in parameters.items() if "Default" not in spec} <= given


def check_s3_copy(words):
    assert words[3] == makefile_variable("LAMBDA_ZIP"), words
    assert words[4].startswith("s3://")


@pytest.mark.django_db
def test_every_command_of_the_deploy_doc_is_real():
    found = commands()
    assert len(found) >= 10
    for command in found:
        words = shlex.split(command.replace("$DJANGO_SECRET_KEY", "x" * 50))
        if words[0] == "make":
            check_make(words)
        elif words[:2] == ["python", "manage.py"]:
            check_manage(words)
        elif words[:3] == ["aws", "cloudformation", "deploy"]:
            check_cloudformation_deploy(words)
        elif words[:3] == ["aws", "s3", "cp"]:
            check_s3_copy(words)
        else:
            pytest.fail(f"docs/deploy-aws.md: a command no test checks: {command}")
