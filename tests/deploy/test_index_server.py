"""The index server on AWS (IndexBackend=resp, deploy/aws/site.yaml): serve_index runs as one task, never
two; every container that reads or writes the index (web, sync_index, operator) gets its URL and its
password by reference, and the server the same password; its security group admits RESP from the
application only; the Lambda consumer is refused with resp as with files; and the server's health check
is a command that really pings serve_index started with the container's own environment."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from urllib.parse import urlsplit

import pytest

from deploy.aws.template import DIRECTORY, ROOT_TEMPLATE, TEMPLATE, Resolver, load, role_policies
from tests.deploy.aws_actions import ROOT
from tests.deploy.test_template import _required_parameters, decoded
from tests.services import free_port

SITE = DIRECTORY / "site.yaml"
# The task definitions whose containers use the index, {logical id: container name}.
CLIENTS = {"WebTask": "web", "SyncTask": "sync-index", "OperatorTask": "operator"}
SERVER_RESOURCES = {"IndexNamespace", "IndexDiscovery", "IndexServerSecurityGroup", "IndexServerTask",
                    "IndexServerService", "IndexServerAccessPoint", "IndexServerLogs"}
RESP_SETTINGS = {"PAGINATION_INDEX_RESP_URL", "PAGINATION_INDEX_RESP_PASSWORD"}


def site(**parameters) -> tuple[dict, Resolver, dict]:
    template = load(SITE)
    given = {**_required_parameters(template), "StreamConsumer": "service", **parameters}
    return template, Resolver(template, parameters=given), given


def container(template: dict, resolver: Resolver, logical_id: str) -> dict:
    (found,) = resolver.value(template["Resources"][logical_id]["Properties"]["ContainerDefinitions"])
    return found


def environment(found: dict) -> dict:
    return {item["Name"]: item["Value"] for item in found.get("Environment", [])}


def secrets(found: dict) -> dict:
    return {item["Name"]: item["ValueFrom"] for item in found.get("Secrets", [])}


def test_the_index_server_runs_as_one_task_never_two():
    template = decoded(SITE)
    service = template["Resources"]["IndexServerService"]
    properties = service["Properties"]
    assert service["Condition"] == "RespServer"
    assert properties["DesiredCount"] == 1
    deployment = properties["DeploymentConfiguration"]
    # No second task while the first counts as running: ECS stops the old one, then starts the new.
    assert (deployment["MaximumPercent"], deployment["MinimumHealthyPercent"]) == (100, 0)
    # Nothing scales it.
    for logical_id, resource in template["Resources"].items():
        if resource["Type"].startswith("AWS::ApplicationAutoScaling::"):
            assert "IndexServer" not in str(resource), logical_id
    # Its folder is its own: no other task definition mounts its access point.
    users = [logical_id for logical_id, resource in template["Resources"].items()
             if resource["Type"] == "AWS::ECS::TaskDefinition" and "IndexServerAccessPoint" in str(resource)]
    assert users == ["IndexServerTask"]
    (server,) = template["Resources"]["IndexServerTask"]["Properties"]["ContainerDefinitions"]
    assert server["Command"] == ["python", "manage.py", "serve_index"]
    # No task role: serve_index calls no AWS API, so there is no role to enforce.
    assert "TaskRoleArn" not in template["Resources"]["IndexServerTask"]["Properties"]
    # Found by its Cloud Map name.
    assert properties["ServiceRegistries"] == [{"RegistryArn": {"Fn::GetAtt": ["IndexDiscovery", "Arn"]}}]


PASSWORD_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:resp-AbCdEf"


@pytest.mark.parametrize("backends", [{"IndexBackend": "resp"},
                                      {"IndexBackend": "dynamodb", "NextIndexBackend": "resp"}])
def test_every_container_using_the_index_reaches_the_server_with_its_password(backends):
    template, resolver, given = site(**backends, RespPasswordSecretArn=PASSWORD_ARN)
    assert all(resolver.exists(logical_id) for logical_id in SERVER_RESOURCES)
    server = container(template, resolver, "IndexServerTask")
    server_env = environment(server)
    port = int(server_env["PAGINATION_INDEX_RESP_PORT"])
    assert server_env["PAGINATION_INDEX_RESP_BIND"] == "0.0.0.0"  # the task's own address, not loopback
    assert [mapping["ContainerPort"] for mapping in server["PortMappings"]] == [port]
    (mount,) = server["MountPoints"]
    assert server_env["PAGINATION_INDEX_PATH"] == mount["ContainerPath"]
    assert secrets(server)["PAGINATION_INDEX_RESP_PASSWORD"] == given["RespPasswordSecretArn"]
    # The name the clients use is the one Cloud Map registers: <service>.<namespace>, on the server's port.
    resources = template["Resources"]
    namespace = resolver.value(resources["IndexNamespace"]["Properties"]["Name"])
    name = resources["IndexDiscovery"]["Properties"]["Name"]
    assert resources["IndexDiscovery"]["Properties"]["NamespaceId"] == {"Ref": "IndexNamespace"}
    assert [record["Type"] for record in resources["IndexDiscovery"]["Properties"]["DnsConfig"]["DnsRecords"]] == ["A"]
    for logical_id, container_name in CLIENTS.items():
        found = container(template, resolver, logical_id)
        assert found["Name"] == container_name
        env = environment(found)
        url = urlsplit(env["PAGINATION_INDEX_RESP_URL"])
        expected = ("redis", f"{name}.{namespace}", port, "/0")
        assert (url.scheme, url.hostname, url.port, url.path) == expected, logical_id
        assert url.password is None and url.username is None, "the password is a secret of its own"
        assert secrets(found)["PAGINATION_INDEX_RESP_PASSWORD"] == given["RespPasswordSecretArn"], logical_id
        assert env["PAGINATION_INDEX_BACKEND"] == backends["IndexBackend"]
    # ECS's agent may read the password to inject it.
    agent = role_policies(template=template, roles={"ecs-agent": "TaskExecutionRole"}, parameters=given)["ecs-agent"]
    (statement,) = [statement for document in agent for statement in document["Statement"]
                    if statement["Action"] == "secretsmanager:GetSecretValue"]
    assert given["RespPasswordSecretArn"] in statement["Resource"]


@pytest.mark.parametrize("backend", ["dynamodb", "files", "redis", "relational"])
def test_without_resp_there_is_no_server_and_no_resp_setting(backend):
    template, resolver, given = site(IndexBackend=backend)
    assert not any(resolver.exists(logical_id) for logical_id in SERVER_RESOURCES)
    for logical_id in CLIENTS:
        if resolver.exists(logical_id):
            found = container(template, resolver, logical_id)
            assert not (set(environment(found)) | set(secrets(found))) & RESP_SETTINGS, logical_id
    # The files backend's log keeps its file system; the resp server's access point is not made.
    assert resolver.exists("IndexLogFileSystem") == (backend == "files")


def test_the_index_server_admits_resp_from_the_application_only():
    template = decoded(SITE)
    resources = template["Resources"]
    (rule,) = resources["IndexServerSecurityGroup"]["Properties"]["SecurityGroupIngress"]
    (server,) = resources["IndexServerTask"]["Properties"]["ContainerDefinitions"]
    port = int(next(item["Value"] for item in server["Environment"] if item["Name"] == "PAGINATION_INDEX_RESP_PORT"))
    assert rule == {"IpProtocol": "tcp", "FromPort": port, "ToPort": port,
                    "SourceSecurityGroupId": {"Ref": "AppSecurityGroupId"}, "Description": "RESP from the application"}
    assert resources["IndexServerService"]["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"][
        "SecurityGroups"] == [{"Ref": "IndexServerSecurityGroup"}]
    # Every client is in the application's group: the web and sync_index services here, the operator's
    # tasks through deploy/aws/run_command.py (the stack's AppSecurityGroupId output).
    for logical_id in ("WebService", "SyncService"):
        groups = resources[logical_id]["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]["SecurityGroups"]
        assert {"Ref": "AppSecurityGroupId"} in groups, logical_id
    assert 'outputs["AppSecurityGroupId"]' in (ROOT / "deploy" / "aws" / "run_command.py").read_text()
    # The server reaches its EFS folder: the file system's group admits NFS from the server's group.
    resolved = Resolver(load(SITE), parameters={**_required_parameters(load(SITE)), "IndexBackend": "resp"})
    nfs = resolved.value(load(SITE)["Resources"]["IndexLogSecurityGroup"]["Properties"]["SecurityGroupIngress"])
    assert {"IpProtocol": "tcp", "FromPort": 2049, "ToPort": 2049, "SourceSecurityGroupId": "IndexServerSecurityGroup",
            "Description": "NFS from the index server"} in nfs


def refused(parameters: dict) -> set[str]:
    """The data stack's rules that refuse `parameters` (a rule refuses when its condition holds and an
    assertion does not)."""
    template = load(TEMPLATE)
    resolver = Resolver(template, parameters=parameters)
    found = set()
    for name, rule in template["Rules"].items():
        if "RuleCondition" in rule and not resolver.value(rule["RuleCondition"]):
            continue
        if not all(resolver.value(assertion["Assert"]) for assertion in rule["Assertions"]):
            found.add(name)
    return found


@pytest.mark.parametrize("consumer", ["service", "lambda"])
def test_the_lambda_consumer_is_refused_with_resp_as_with_files(consumer):
    backends = decoded(ROOT_TEMPLATE)["Parameters"]["IndexBackend"]["AllowedValues"]
    assert "resp" in backends
    for backend in backends:
        for following in ("none", "resp", "files"):
            rules = refused({"IndexBackend": backend, "NextIndexBackend": following, "StreamConsumer": consumer})
            resp = consumer == "lambda" and "resp" in (backend, following)
            files = consumer == "lambda" and "files" in (backend, following)
            assert ("RespBackendNeedsTheService" in rules, "FilesBackendNeedsTheService" in rules) == (resp, files), \
                (backend, following, consumer, rules)


def test_the_templates_agree_on_the_backends():
    for parameter in ("IndexBackend", "NextIndexBackend"):
        allowed = [decoded(path)["Parameters"][parameter]["AllowedValues"] for path in (ROOT_TEMPLATE, TEMPLATE, SITE)]
        assert allowed[0] == allowed[1] == allowed[2], (parameter, allowed)
    # The root stack makes the password exactly when the site runs the server.
    root = decoded(ROOT_TEMPLATE)
    stores = root["Resources"]["Stores"]["Properties"]["Parameters"]
    assert stores["MakeRespPassword"] == {"Fn::If": ["MakeResp", "true", "false"]}
    assert root["Conditions"]["MakeResp"] == decoded(SITE)["Conditions"]["RespServer"]


def test_the_health_check_pings_serve_index_run_with_the_containers_environment(tmp_path):
    """The task definition's HealthCheck command, run against `manage.py serve_index` started with the
    server container's own environment and secrets: 0 while it answers with the right password,
    non-zero with a wrong one and once it has stopped."""
    template, resolver, given = site(IndexBackend="resp")
    server = container(template, resolver, "IndexServerTask")
    port = free_port()
    values = {"DJANGO_SECRET_KEY": "test-only-key", "PAGINATION_INDEX_RESP_PASSWORD": "test-only-password"}
    assert set(secrets(server)) == set(values)
    env = {**environment(server), **values, "PATH": os.environ["PATH"], "HOME": str(tmp_path),
           "SHOP_VAR_DIR": str(tmp_path / "var"), "PAGINATION_INDEX_PATH": str(tmp_path / "index"),
           "PAGINATION_INDEX_RESP_PORT": str(port)}
    command = server["Command"]
    assert command[0] == "python"
    check = server["HealthCheck"]
    assert check["Command"][:2] == ["CMD", "python"]  # no shell, and no redis-cli: the image has neither need
    probe = [sys.executable, *check["Command"][2:]]

    def healthy(**changes) -> bool:
        return subprocess.run(probe, env={**env, **changes}, capture_output=True, timeout=30).returncode == 0

    process = subprocess.Popen([sys.executable, *command[1:]], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not healthy():
            assert process.poll() is None, process.stdout.read().decode()
            assert time.monotonic() < deadline, "serve_index never answered the health check"
            time.sleep(0.2)
        assert not healthy(PAGINATION_INDEX_RESP_PASSWORD="wrong")
        assert not healthy(PAGINATION_INDEX_RESP_PASSWORD="")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=check["Timeout"] + server["StopTimeout"]) == 0
    assert not healthy()
