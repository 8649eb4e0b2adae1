"""Reads the deploy templates (deploy/aws/*.yaml): the IAM roles' policy documents of data.yaml,
resolved for given parameters, so that the strict endpoint can enforce exactly what the templates grant
(tests/deploy/).

Only the intrinsic functions the templates' policies use are resolved (Ref, Fn::Sub, Fn::GetAtt,
Fn::If, Fn::Equals, Fn::Not, Fn::Or, Fn::And, Fn::Join, Fn::Split); anything else is an error, never a silent guess.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

DIRECTORY = Path(__file__).parent
# The root stack (its nested stacks are the other templates but bootstrap.yaml, made before it).
ROOT_TEMPLATE = DIRECTORY / "shop.yaml"
BOOTSTRAP_TEMPLATE = DIRECTORY / "bootstrap.yaml"
# The template holding the tables and the roles the shop's code runs with.
TEMPLATE = DIRECTORY / "data.yaml"
TEMPLATES = sorted(DIRECTORY.glob("*.yaml"))
# The components and their roles' logical ids (data.yaml).
ROLES = {"web": "WebRole", "stream": "StreamConsumerRole", "operator": "OperatorRole"}
# Roles an AWS service assumes to do its own part, {(template, logical id): the component name the
# tests enforce them as}: no code of the shop runs with them (tests/deploy/aws_actions.py, ON_BEHALF).
SERVICE_ROLES = {("data.yaml", "HeartbeatRole"): "heartbeat", ("site.yaml", "TaskExecutionRole"): "ecs-agent"}
NO_VALUE = object()


class TemplateError(ValueError):
    pass


class _Loader(yaml.SafeLoader):
    """YAML with CloudFormation's short forms (!Ref, !Sub, ...) read as their long forms."""


def _short_form(loader, suffix, node):
    name = suffix if suffix in ("Ref", "Condition") else f"Fn::{suffix}"  # their long forms have no Fn::
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_Loader.add_multi_constructor("!", _short_form)


def load(path: Path = TEMPLATE) -> dict:
    return yaml.load(path.read_text(), Loader=_Loader)


class Resolver:
    """Evaluates the template's intrinsic functions for one set of parameters. Resources' physical
    names default to their logical ids (tests pass their own through `physical`)."""

    def __init__(self, template: dict, *, parameters: dict | None = None, region: str = "us-east-1",
                 account: str = "123456789012", stack_name: str = "shop", physical: dict | None = None):
        self.template = template
        self.region, self.account, self.stack_name = region, account, stack_name
        self.parameters = {}
        for name, spec in template.get("Parameters", {}).items():
            value = (parameters or {}).get(name, spec.get("Default"))
            if value is None:
                value = ""
            if spec.get("Type") == "CommaDelimitedList" and isinstance(value, str):
                value = [item for item in value.split(",") if item]
            self.parameters[name] = value
        unknown = set(parameters or {}) - set(self.parameters)
        if unknown:
            raise TemplateError(f"no such parameters in the template: {sorted(unknown)}")
        self.physical = dict(physical or {})
        self._conditions: dict[str, bool] = {}

    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            self._conditions[name] = bool(self.value(self.template["Conditions"][name]))
        return self._conditions[name]

    def exists(self, logical_id: str) -> bool:
        condition = self.template["Resources"][logical_id].get("Condition")
        return condition is None or self.condition(condition)

    def ref(self, name: str):
        pseudo = {"AWS::Region": self.region, "AWS::AccountId": self.account, "AWS::Partition": "aws",
                  "AWS::StackName": self.stack_name, "AWS::URLSuffix": "amazonaws.com", "AWS::NoValue": NO_VALUE}
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        if name in self.template["Resources"]:
            return self.physical.get(name, name)
        raise TemplateError(f"Ref to unknown {name!r}")

    def attribute(self, logical_id: str, attribute: str) -> str:
        kind = self.template["Resources"][logical_id]["Type"]
        name = self.ref(logical_id)
        arns = {"AWS::S3::Bucket": f"arn:aws:s3:::{name}",
                "AWS::SQS::Queue": f"arn:aws:sqs:{self.region}:{self.account}:{name}",
                "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{self.region}:{self.account}:table/{name}",
                "AWS::IAM::Role": f"arn:aws:iam::{self.account}:role/{name}"}
        if attribute == "Arn" and kind in arns:
            return arns[kind]
        if (kind, attribute) == ("AWS::SQS::Queue", "QueueName"):
            return name
        raise TemplateError(f"Fn::GetAtt {logical_id}.{attribute} is not resolved here")

    def value(self, node):
        if isinstance(node, list):
            items = [self.value(item) for item in node]
            return [item for item in items if item is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, argument), = node.items()
            if key == "Ref":
                return self.ref(argument)
            if key == "Fn::Sub":
                return self._sub(argument)
            if key == "Fn::GetAtt":
                return self.attribute(*argument)
            if key == "Fn::If":
                condition, yes, no = argument
                return self.value(yes if self.condition(condition) else no)
            if key == "Fn::Equals":
                first, second = (self.value(item) for item in argument)
                return first == second
            if key == "Fn::Not":
                return not self.value(argument[0])
            if key == "Fn::Or":
                return any(self.value(item) for item in argument)
            if key == "Fn::And":
                return all(self.value(item) for item in argument)
            if key == "Condition":
                return self.condition(argument)
            if key == "Fn::Join":
                separator, items = argument
                return separator.join(self.value(items))
            if key == "Fn::Split":
                separator, text = argument
                return self.value(text).split(separator)
            if key.startswith("Fn::"):
                raise TemplateError(f"{key} is not resolved here")
        resolved = {key: self.value(item) for key, item in node.items()}
        return {key: item for key, item in resolved.items() if item is not NO_VALUE}

    def _sub(self, argument) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument

        def replace(match):
            name = match[1]
            if name in variables:
                return str(self.value(variables[name]))
            if "." in name and not name.startswith("AWS::"):
                return str(self.attribute(*name.split(".", 1)))
            return str(self.ref(name))

        return re.sub(r"\$\{([^}!]+)\}", replace, text)


def role_policies(*, parameters: dict | None = None, region: str = "us-east-1", account: str = "123456789012",
                  physical: dict | None = None, template: dict | None = None,
                  roles: dict[str, str] = ROLES) -> dict[str, list[dict]]:
    """{component: [its role's policy documents]} for the given parameters. Managed policies attached
    by ARN (the Lambda's VPC access, ECS's task execution) are AWS's, not the shop's, and are not
    included."""
    template = template or load()
    resolver = Resolver(template, parameters=parameters, region=region, account=account, physical=physical)
    found = {}
    for component, logical_id in roles.items():
        properties = template["Resources"][logical_id]["Properties"]
        found[component] = [resolver.value(policy["PolicyDocument"]) for policy in properties.get("Policies", [])]
    return found


def granted_actions(documents: list[dict]) -> set[str]:
    """Every action an Allow statement of `documents` names (as written, wildcards included)."""
    actions = set()
    for document in documents:
        for statement in document.get("Statement", []):
            if statement.get("Effect") == "Allow":
                named = statement.get("Action", [])
                actions.update([named] if isinstance(named, str) else named)
    return actions
