"""docs/deploy-aws.md can be followed as written: each `make` target exists, each `manage.py` command
(directly or through deploy/aws/run_command.py) parses its options, each `aws cloudformation deploy`
names a template (or the package of shop.yaml), only its parameters and all the ones it requires, and
the zip it uploads is the one `make lambda-package` writes. The runbooks' `manage.py` commands parse
too."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from deploy.aws import run_command
from deploy.aws.template import BOOTSTRAP_TEMPLATE, ROOT_TEMPLATE, load
from stack.dynamodb_local import ROOT

DOC = ROOT / "docs" / "deploy-aws.md"
RUNBOOKS = ROOT / "docs" / "runbooks"
PACKAGED = "packaged.yaml"  # what `aws cloudformation package` writes from shop.yaml


def commands(path: Path = DOC) -> list[str]:
    text = path.read_text()
    found = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        found += [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    found += [" ".join(command.split()) for command in
              re.findall(r"`((?:python manage\.py|python -m deploy\.aws\.run_command) [^`]+)`", text)]
    return found


def makefile_variable(name: str) -> str:
    return re.search(rf"^{name} \?= (.+)$", (ROOT / "Makefile").read_text(), flags=re.M)[1]


def check_make(words):
    assert re.search(rf"^{re.escape(words[1])}:", (ROOT / "Makefile").read_text(), flags=re.M), words


def check_manage(words):
    name, *arguments = words[2:]
    assert name in get_commands(), f"no manage.py {name}"
    load_command_class(get_commands()[name], name).create_parser("manage.py", name).parse_args(arguments)


def options_of(words) -> dict[str, list[str]]:
    options, key = {}, None
    for word in words:
        if word.startswith("--"):
            key = word
            options[key] = []
        else:
            options[key].append(word)
    return options


def check_cloudformation_package(words):
    options = options_of(words[3:])
    assert ROOT / options["--template-file"][0] == ROOT_TEMPLATE
    assert options["--output-template-file"] == [PACKAGED]
    assert options["--s3-bucket"]


def check_cloudformation_deploy(words):
    options = options_of(words[3:])
    template = options["--template-file"][0]
    path = ROOT_TEMPLATE if template == PACKAGED else ROOT / template
    assert path in (ROOT_TEMPLATE, BOOTSTRAP_TEMPLATE), template
    if path == ROOT_TEMPLATE:
        assert options["--capabilities"] == ["CAPABILITY_IAM"]  # the roles have generated names
    parameters = load(path).get("Parameters", {})
    given = {item.split("=", 1)[0] for item in options.get("--parameter-overrides", [])}
    assert given <= set(parameters), given - set(parameters)
    assert {name for name, spec in parameters.items() if "Default" not in spec} <= given


def check_run_command(words):
    """python -m deploy.aws.run_command --stack S [--setting N=V] -- COMMAND ARGS: its own options,
    and the manage.py command after them."""
    options, command, settings = run_command.parse(words[3:])
    assert options.stack
    check_manage(["python", "manage.py", *command])


def check_docker(words):
    if words[1] == "build":
        assert words[-1] == "." and (ROOT / "Dockerfile").is_file()
    else:
        assert words[1] == "push", words


def check_s3_copy(words):
    assert words[3] == makefile_variable("LAMBDA_ZIP"), words
    assert words[4].startswith("s3://")


@pytest.mark.django_db
def test_every_command_of_the_deploy_doc_is_real():
    found = commands()
    assert len(found) >= 15
    for command in found:
        words = shlex.split(command)
        if words[0] == "make":
            check_make(words)
        elif words[:2] == ["python", "manage.py"]:
            check_manage(words)
        elif words[:3] == ["python", "-m", "deploy.aws.run_command"]:
            check_run_command(words)
        elif words[:3] == ["aws", "cloudformation", "package"]:
            check_cloudformation_package(words)
        elif words[:3] == ["aws", "cloudformation", "deploy"]:
            check_cloudformation_deploy(words)
        elif words[:3] == ["aws", "s3", "cp"]:
            check_s3_copy(words)
        elif words[0] == "docker":
            check_docker(words)
        else:
            pytest.fail(f"docs/deploy-aws.md: a command no test checks: {command}")


@pytest.mark.django_db
def test_every_manage_py_command_of_the_runbooks_parses():
    checked = 0
    for page in sorted(RUNBOOKS.glob("*.md")):
        for command in commands(page):
            words = shlex.split(command)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # NAME=value before the command
                words = words[1:]
            if words[:2] == ["python", "manage.py"]:
                check_manage(words)
            elif words[:3] == ["python", "-m", "deploy.aws.run_command"]:
                check_run_command(words)
            else:
                continue
            checked += 1
    assert checked >= 10
