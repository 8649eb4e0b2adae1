"""A pytest plugin (tests/conftest.py loads it): every AWS action the code under test calls, with the
component whose code called it, checked against that component's role in deploy/aws/data.yaml.

- Calls are seen through botocore's event hooks (`before-parameter-build` and `after-call` on every
  client made; a call answered AccessDeniedException is one a test asked to be refused and is left
  out), plus the page path's Query, which is signed and sent without botocore's client
  (comments/table/direct.py).
- The component is the outermost entry point running: a request through Django's handler is `web`,
  `pagination_index.aws_lambda.handler` and `manage.py sync_index` are `stream`, any other management
  command is `operator`. Calls outside them are the tests' own set-up and are not checked, and so
  are calls under settings whose index sources are on other tables (the library's own tests).
- Each call is checked with the strict endpoint's own evaluator (stack/strict_endpoint/iam.py) against
  the role's policies resolved for the table, index table and bucket in force at the call.
- A call not granted fails the run. When the whole suite ran, the actions a role grants that its
  component never called (and that AWS does not call with the role on its behalf: ON_BEHALF, each
  with its reason) are listed in the summary; tests/deploy/test_roles.py asserts it for the tour.

The record is written to test-artifacts/aws-actions.json. Under pytest-xdist each worker hands its
calls to the controller, which checks them all.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

ACCOUNT = "123456789012"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACT = Path(os.environ.get("AWS_ACTIONS_ARTIFACT", ROOT / "test-artifacts" / "aws-actions.json"))
TESTS = f"{ROOT / 'tests'}{os.sep}"
# Granted to a role for AWS to use, not for the shop's code: nothing in the suite can call them.
ON_BEHALF = {
    "stream": {
        # The event source mapping polls the stream with the function's execution role
        # (Lambda developer guide, "Using AWS Lambda with Amazon DynamoDB": execution role permissions).
        "dynamodb:ListStreams": "the event source mapping lists the table's streams with the Lambda's role",
        # Lambda's on-failure destination is written by Lambda with the function's role.
        "sqs:SendMessage": "the mapping sends discarded batches' descriptions to the on-failure queue",
        # The runtime writes the function's logs (and the EMF metrics in them) with its role.
        "logs:CreateLogStream": "the Lambda runtime creates the function's log streams",
        "logs:PutLogEvents": "the Lambda runtime writes the function's logs and EMF metrics",
        # shop/settings.py reads the Lambda's secrets at start-up, before any entry point runs: the
        # call is tested with its own (tests/deploy/test_secrets.py), not seen by this plugin.
        "secretsmanager:GetSecretValue": "the Lambda's settings read its secrets at start-up",
    },
    "web": {
        # S3 consults it while answering the web's GETs: without it a missing key is 403 AccessDenied,
        # not 404 (GetObject API reference, "Permissions"); the web never lists the bucket itself.
        "s3:ListBucket": "S3 answers a GET of a missing index key 404 (not 403) only with it",
    },
    # EventBridge Scheduler writes the stream heartbeat item with this role (deploy/aws/data.yaml);
    # tests/deploy/test_heartbeat.py sends the schedule's own PutItem through the strict endpoint.
    "heartbeat": {
        "dynamodb:PutItem": "the scheduler writes the stream heartbeat item",
    },
    # ECS's agent, for the tasks (deploy/aws/site.yaml): it injects their secrets.
    "ecs-agent": {
        "secretsmanager:GetSecretValue": "ECS injects the tasks' Secrets when it starts them",
    },
}
S3_ACTIONS = {"GetObject": "s3:GetObject", "HeadObject": "s3:GetObject", "PutObject": "s3:PutObject",
              "DeleteObject": "s3:DeleteObject", "DeleteObjects": "s3:DeleteObject", "ListObjectsV2": "s3:ListBucket",
              "CreateBucket": "s3:CreateBucket", "DeleteBucket": "s3:DeleteBucket"}

_state = threading.local()
_component = {"name": None, "depth": 0}  # process-wide: worker threads (parallel Scans, shard readers) inherit it
_entries = threading.Lock()


class Recorder:
    def __init__(self):
        self.calls: Counter = Counter()  # (component, action, resource, parameters json) -> count
        self._lock = threading.Lock()

    def record(self, service: str, operation: str, params: dict, region: str) -> None:
        component = _component["name"]
        if component is None or _called_by_a_test() or not _the_shops_deployment():
            return
        context = _context()
        with self._lock:
            for action, resource in _actions(service, operation, params, region):
                self.calls[(component, action, resource, json.dumps(context, sort_keys=True))] += 1

    def since(self, mark: Counter) -> list[dict]:
        return [_as_dict(key, count - mark.get(key, 0)) for key, count in self.calls.items() if count > mark.get(key, 0)]

    def all(self) -> list[dict]:
        return [_as_dict(key, count) for key, count in sorted(self.calls.items())]


def _the_shops_deployment() -> bool:
    """Whether the settings in force describe what deploy/aws/data.yaml deploys: index sources on the
    shop's comments table. The library's own tests (tests/library) declare tables of other shapes, as
    an adopter's project would; its roles are that project's to write, not the shop's template's."""
    from django.conf import settings

    return all(source.get("TABLE", settings.COMMENTS_TABLE) == settings.COMMENTS_TABLE
               for source in settings.PAGINATION_INDEX.get("SOURCES", {}).values())


def _called_by_a_test() -> bool:
    """Whether the call is a test's own, not the component's: walking out from the call, a test's
    frame comes before the component's entry point. So a test's hook writing to the table while a
    command runs, and a test seeding the table (through the project's own helpers) while its live
    server answers a request in another thread, are the test's. A thread of the component's own
    (parallel Scans, shard readers) has neither frame and is the component's."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if path == __file__:
            if frame.f_code.co_name == "entered":  # the component's entry point (_enter)
                return False
        elif path.startswith(TESTS):
            return True
        frame = frame.f_back
    return False


def _as_dict(key, count) -> dict:
    component, action, resource, context = key
    return {"component": component, "action": action, "resource": resource, "context": json.loads(context),
            "count": count}


def _context() -> dict:
    """The template parameters (and bucket name) that the settings in force correspond to."""
    from django.conf import settings

    backends = {path: name for name, path in settings.PAGINATION_INDEX_BACKENDS.items()}
    backend = backends.get(settings.PAGINATION_INDEX["BACKEND"], "relational")
    options = settings.PAGINATION_INDEX.get("OPTIONS", {})
    parameters = {"CommentsTableName": settings.COMMENTS_TABLE, "IndexBackend": backend}
    if backend == "dynamodb":
        parameters["IndexTableName"] = options.get("TABLE", "")
    physical = {}
    if backend == "files" and options.get("S3_BUCKET"):
        parameters["IndexS3Prefix"] = options.get("S3_PREFIX", "pagination-index/")
        physical["IndexBucket"] = options["S3_BUCKET"]
    return {"parameters": parameters, "physical": physical}


def _actions(service: str, operation: str, params: dict, region: str) -> list[tuple[str, str]]:
    from stack.strict_endpoint.operations import requested_actions

    if service in ("dynamodb", "dynamodbstreams"):
        return requested_actions("streams" if service == "dynamodbstreams" else "dynamodb", operation, params,
                                 region=region, account=ACCOUNT)
    if service == "s3":
        bucket = params.get("Bucket", "")
        key = params.get("Key") or next((o["Key"] for o in params.get("Delete", {}).get("Objects", [])), None)
        resource = f"arn:aws:s3:::{bucket}" + (f"/{key}" if key and operation != "ListObjectsV2" else "")
        return [(S3_ACTIONS.get(operation, f"s3:{operation}"), resource)]
    if service == "sqs" and params.get("QueueUrl"):  # the queue's name is the URL's last segment
        name = params["QueueUrl"].rstrip("/").rsplit("/", 1)[-1]
        return [(f"sqs:{operation}", f"arn:aws:sqs:{region}:{ACCOUNT}:{name}")]
    return [(f"{service}:{operation}", "*")]


@functools.lru_cache(maxsize=256)
def _policies(component: str, context: str):
    from deploy.aws.template import role_policies
    from stack.strict_endpoint.iam import Policies

    spec = json.loads(context)
    documents = role_policies(parameters=spec["parameters"], physical=spec["physical"], account=ACCOUNT)
    return Policies({component: {"policies": documents[component]}})


def ungranted(calls: list[dict]) -> list[dict]:
    """The calls that the caller's role does not allow, as the strict endpoint would refuse them."""
    from stack.strict_endpoint.errors import AwsError

    refused = []
    for call in calls:
        policies = _policies(call["component"], json.dumps(call["context"], sort_keys=True))
        try:
            policies.check(call["component"], call["component"], [(call["action"], call["resource"])])
        except AwsError:
            refused.append(call)
    return refused


def unused_grants(calls: list[dict], backends=("relational", "redis", "dynamodb", "files")) -> dict[str, set[str]]:
    """{component: actions its role grants (with any backend) that no recorded call of it used}."""
    from deploy.aws.template import ROLES, granted_actions, role_policies

    called: dict[str, set[str]] = {}
    for call in calls:
        called.setdefault(call["component"], set()).add(call["action"].lower())
    unused = {}
    for component in ROLES:
        granted = set()
        for backend in backends:
            granted |= granted_actions(role_policies(parameters={"IndexBackend": backend})[component])
        left = {action for action in granted if action.lower() not in called.get(component, set())
                and action not in ON_BEHALF.get(component, {})}
        if left:
            unused[component] = left
    return unused


# --- wiring ---------------------------------------------------------------------------------------
def _enter(component: str):
    def wrap(function):
        @functools.wraps(function)
        def entered(*args, **kwargs):
            # Counted, not saved and restored: entry points run in parallel too (the Lambda driver
            # invokes the handler on several shards at once), and the component ends with the last.
            name = component(*args) if callable(component) else component
            with _entries:
                _component["name"] = _component["name"] or name
                _component["depth"] += 1
            try:
                return function(*args, **kwargs)
            finally:
                with _entries:
                    _component["depth"] -= 1
                    if not _component["depth"]:
                        _component["name"] = None
        return entered
    return wrap


# Commands that run on no AWS deployment: seed_demo fills DynamoDB Local with demo data for `make run`.
NOT_DEPLOYED = {"seed_demo": "demo data for `make run`, never run against AWS"}


def _command_component(command, *args) -> str | None:
    name = type(command).__module__.rpartition(".")[2]
    if name in NOT_DEPLOYED:
        return None
    return "stream" if name == "sync_index" else "operator"


RECORDER = Recorder()


def pytest_configure(config):
    import botocore.session
    from django.core.handlers.base import BaseHandler
    from django.core.management.base import BaseCommand

    import pagination_index.aws_lambda as aws_lambda
    from pagination_index.aws.direct import DirectReads

    BaseHandler.get_response = _enter("web")(BaseHandler.get_response)
    BaseCommand.execute = _enter(_command_component)(BaseCommand.execute)
    aws_lambda.handler = _enter("stream")(aws_lambda.handler)

    create_client = botocore.session.Session.create_client

    @functools.wraps(create_client)
    def create_recorded_client(self, service_name, *args, **kwargs):
        client = create_client(self, service_name, *args, **kwargs)
        region = client.meta.region_name
        service = client.meta.service_model.service_name

        def before_parameter_build(params, model, context, **_):
            context["recorded_action"] = (model.name, dict(params))

        def after_call(parsed, context, **_):
            # A call the endpoint refused is what a test asked to be refused (tests/deploy/test_roles.py).
            if "recorded_action" in context and parsed.get("Error", {}).get("Code") != "AccessDeniedException":
                RECORDER.record(service, *context["recorded_action"], region)

        client.meta.events.register("before-parameter-build", before_parameter_build)
        client.meta.events.register("after-call", after_call)
        return client

    botocore.session.Session.create_client = create_recorded_client

    # The page path's Query is signed and sent without botocore's client (comments/table/direct.py):
    # each signed request is one call.
    sign = DirectReads.signed_request

    @functools.wraps(sign)
    def recorded_sign(self, operation, params):
        RECORDER.record("dynamodb", operation, params, self.region)
        return sign(self, operation, params)

    DirectReads.signed_request = recorded_sign


@pytest.fixture
def aws_actions():
    """The calls recorded while the test runs: `aws_actions()` lists them."""
    mark = Counter(RECORDER.calls)
    return lambda: RECORDER.since(mark)


def _whole_suite(session) -> bool:
    config = session.config
    selected = config.getoption("keyword") or config.getoption("markexpr") or config.getoption("deselect")
    return not selected and not config.args or [str(Path(a).resolve()) for a in config.args] == [
        str(Path(config.rootpath, path).resolve()) for path in config.getini("testpaths")]


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker: its calls go to the controller
        session.config.workeroutput["aws_actions"] = [[list(key), count] for key, count in RECORDER.calls.items()]
        return
    calls = RECORDER.all()
    refused = ungranted(calls)
    unused = unused_grants(calls) if _whole_suite(session) and exitstatus == 0 else {}
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.write_text(json.dumps({"calls": calls, "ungranted": refused,
                                    "unused_grants": {k: sorted(v) for k, v in unused.items()}}, indent=1))
    session.config._aws_actions_problems = (refused, unused)
    if refused:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: a worker's calls join the record the run is checked against (the
    controller makes none of its own)."""
    for key, count in getattr(node, "workeroutput", {}).get("aws_actions", []):
        RECORDER.calls[tuple(key)] += count


def pytest_terminal_summary(terminalreporter, config):
    refused, unused = getattr(config, "_aws_actions_problems", ([], {}))
    if not (refused or unused):
        return
    terminalreporter.section("AWS actions against the deploy template's roles")
    for call in refused:
        terminalreporter.write_line(f"NOT GRANTED to {call['component']}: {call['action']} on {call['resource']}")
    for component, actions in unused.items():
        terminalreporter.write_line(f"granted to {component} but never called: {', '.join(sorted(actions))}")
    terminalreporter.write_line(f"details: {ARTIFACT}")
