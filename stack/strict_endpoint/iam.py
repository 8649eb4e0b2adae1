"""IAM identity-policy evaluation for the endpoint's principals, as AWS documents it ("Policy
evaluation logic"): an explicit Deny in any statement wins; otherwise some statement must Allow;
otherwise the request is implicitly denied. Action/NotAction match case-insensitively, Resource/
NotResource case-sensitively, both with `*` and `?` wildcards. Conditions are not evaluated: a policy
with a Condition is refused when configured, so nobody believes one is enforced."""
from __future__ import annotations

import re

from stack.strict_endpoint import errors


class PolicyError(ValueError):
    pass


def _as_list(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def _pattern(text: str, *, case_sensitive: bool) -> re.Pattern:
    """IAM's wildcards: `*` any run of characters (slashes included), `?` any one; nothing else special."""
    regex = "".join(".*" if char == "*" else "." if char == "?" else re.escape(char) for char in text)
    return re.compile(regex, re.DOTALL if case_sensitive else re.DOTALL | re.IGNORECASE)


class Statement:
    def __init__(self, document: dict):
        self.effect = document.get("Effect")
        if self.effect not in ("Allow", "Deny"):
            raise PolicyError(f"a statement's Effect must be Allow or Deny, not {self.effect!r}")
        if "Condition" in document:
            raise PolicyError("Conditions are not evaluated by the strict endpoint; remove them from its policies")
        if ("Action" in document) == ("NotAction" in document):
            raise PolicyError("a statement needs exactly one of Action and NotAction")
        if ("Resource" in document) == ("NotResource" in document):
            raise PolicyError("a statement needs exactly one of Resource and NotResource")
        self.not_action = "NotAction" in document
        self.actions = [_pattern(a, case_sensitive=False)
                        for a in _as_list(document.get("NotAction" if self.not_action else "Action"))]
        self.not_resource = "NotResource" in document
        self.resources = [_pattern(r, case_sensitive=True)
                          for r in _as_list(document.get("NotResource" if self.not_resource else "Resource"))]

    def applies(self, action: str, resource: str) -> bool:
        action_hit = any(p.fullmatch(action) for p in self.actions) != self.not_action
        resource_hit = any(p.fullmatch(resource) for p in self.resources) != self.not_resource
        return action_hit and resource_hit


def statements_of(documents: list[dict]) -> list[Statement]:
    found = []
    for document in documents:
        body = document.get("Statement", [])
        for statement in [body] if isinstance(body, dict) else body:
            found.append(Statement(statement))
    return found


class Policies:
    """Principal name -> its identity policies. A principal with none configured is allowed
    everything (so tests that set no policy are unaffected)."""

    def __init__(self, principals: dict | None = None):
        self._statements: dict[str, list[Statement]] = {}
        for name, entry in (principals or {}).items():
            self.set(name, entry.get("policies", []))

    def set(self, principal: str, documents: list[dict]) -> None:
        self._statements[principal] = statements_of(documents)

    def remove(self, principal: str) -> None:
        self._statements.pop(principal, None)

    def names(self) -> list[str]:
        return sorted(self._statements)

    def check(self, principal: str, principal_arn: str, requested: list[tuple[str, str]]) -> None:
        """Raise AccessDeniedException, in AWS's words, for the first (action, resource) not allowed."""
        statements = self._statements.get(principal)
        if statements is None:
            return
        for action, resource in requested:
            if any(s.effect == "Deny" and s.applies(action, resource) for s in statements):
                raise errors.access_denied(f"User: {principal_arn} is not authorized to perform: {action} on "
                                           f"resource: {resource} with an explicit deny in an identity-based policy")
            if not any(s.effect == "Allow" and s.applies(action, resource) for s in statements):
                raise errors.access_denied(f"User: {principal_arn} is not authorized to perform: {action} on "
                                           f"resource: {resource} because no identity-based policy allows the "
                                           f"{action} action")


def template_principals(spec: dict, *, region: str, account: str) -> dict:
    """The principals of the deploy template's roles (deploy/aws/data.yaml), one per component
    ("web", "stream", "operator"), each with its role's policy documents resolved for
    `spec["parameters"]` (template parameters) and `spec.get("physical")` (resources' names). The
    endpoint enforces exactly what the template grants: config key "iam_template"."""
    from pathlib import Path

    from deploy.aws.template import TEMPLATE, load, role_policies

    template = load(Path(spec.get("path") or TEMPLATE))
    found = role_policies(parameters=spec.get("parameters"), physical=spec.get("physical"), region=region,
                          account=account, template=template)
    return {component: {"policies": documents} for component, documents in found.items()}
