"""The deploy templates (deploy/aws/*.yaml), read as CloudFormation reads them: cfn-lint finds nothing
(errors, warnings or informational) in any of them, and cfn-lint's own decoder gives the templates the
checks below walk: no secret in plain text in any environment, every stream mapping bounds a record's
age well below the stream's 24 hours, every alarm watches a metric with the dimensions AWS (or the
shop's code) publishes it with, lag and heartbeat alarms treat missing data as breaching, every alarm
links its runbook, the nested stacks' parameters and outputs line up, and the comments table is the one
`create_tables` makes."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from cfnlint.decode import decode

from comments.table.schema import table_definition
from deploy.aws.template import (BOOTSTRAP_TEMPLATE, DIRECTORY, ROLES, ROOT_TEMPLATE, SERVICE_ROLES, TEMPLATE,
                                 TEMPLATES, Resolver, granted_actions, load, role_policies)
from tests.config import use_table
from tests.deploy.aws_actions import ON_BEHALF, ROOT

RUNBOOKS = ROOT / "docs" / "runbooks"
STREAM_RETENTION_SECONDS = 86400
# "Well below": at most half the stream's retention, so a record given up on is still in the stream,
# for repair_index_failures to re-read, for at least 12 hours.
MAX_RECORD_AGE_SECONDS = STREAM_RETENTION_SECONDS // 2

# The metrics the alarms may watch, {(namespace, name): (unit, [dimension sets it is published with])},
# from AWS's lists: Lambda developer guide "Types of metrics for Lambda functions" (IteratorAge is in
# milliseconds, Errors counts failed invocations; both per FunctionName, or per FunctionName+Resource
# for a version or alias); DynamoDB developer guide "DynamoDB Metrics and dimensions"
# (Read/WriteThrottleEvents per TableName and per TableName+GlobalSecondaryIndexName; ThrottledRequests
# only with Operation); SQS developer guide "Available CloudWatch metrics for Amazon SQS"; ELB
# "CloudWatch metrics for your Application Load Balancer"; RDS user guide "Amazon CloudWatch metrics for
# Amazon RDS" (FreeStorageSpace in bytes, CPUUtilization in percent, DatabaseConnections a count) and
# "Amazon CloudWatch dimensions for Amazon RDS" (each of DBInstanceIdentifier, DatabaseClass, EngineName
# alone); ElastiCache user guide "Metrics for Valkey and Redis OSS" (EngineCPUUtilization and
# DatabaseMemoryUsagePercentage in percent) and "Monitoring CloudWatch Cluster and Node Metrics" /
# "Dimensions for ElastiCache metrics": calculated and published per node, by CacheClusterId (a
# replication group's member cluster) or CacheClusterId+CacheNodeId; they list no ReplicationGroupId
# dimension. The CornerShop namespace is the shop's own: its dimension sets are what metrics/cloudwatch.py
# and metrics/lambda_emf.py write (test_heartbeat_lines_carry_what_the_alarms_watch).
RDS_DIMENSIONS = [{"DBInstanceIdentifier"}, {"DatabaseClass"}, {"EngineName"}]
ELASTICACHE_DIMENSIONS = [{"CacheClusterId"}, {"CacheClusterId", "CacheNodeId"}]
KNOWN_METRICS = {
    ("AWS/Lambda", "IteratorAge"): ("Milliseconds", [{"FunctionName"}, {"FunctionName", "Resource"}]),
    ("AWS/Lambda", "Errors"): ("Count", [{"FunctionName"}, {"FunctionName", "Resource"}]),
    ("AWS/RDS", "FreeStorageSpace"): ("Bytes", RDS_DIMENSIONS),
    ("AWS/RDS", "CPUUtilization"): ("Percent", RDS_DIMENSIONS),
    ("AWS/RDS", "DatabaseConnections"): ("Count", RDS_DIMENSIONS),
    ("AWS/ElastiCache", "EngineCPUUtilization"): ("Percent", ELASTICACHE_DIMENSIONS),
    ("AWS/ElastiCache", "DatabaseMemoryUsagePercentage"): ("Percent", ELASTICACHE_DIMENSIONS),
    ("AWS/DynamoDB", "ReadThrottleEvents"): ("Count", [{"TableName"}, {"TableName", "GlobalSecondaryIndexName"}]),
    ("AWS/DynamoDB", "WriteThrottleEvents"): ("Count", [{"TableName"}, {"TableName", "GlobalSecondaryIndexName"}]),
    ("AWS/DynamoDB", "ThrottledRequests"): ("Count", [{"TableName", "Operation"}]),
    ("AWS/SQS", "ApproximateNumberOfMessagesVisible"): ("Count", [{"QueueName"}]),
    ("AWS/ApplicationELB", "HTTPCode_Target_5XX_Count"): ("Count", [{"LoadBalancer"}, {"LoadBalancer", "TargetGroup"}]),
    ("AWS/ApplicationELB", "RequestCount"): ("Count", [{"LoadBalancer"}, {"LoadBalancer", "TargetGroup"}]),
    ("AWS/ApplicationELB", "HealthyHostCount"): ("Count", [{"LoadBalancer", "TargetGroup"}]),
    ("CornerShop", "SyncIndexPolls"): ("Count", [{"service"}]),
    ("CornerShop", "StreamApplyLag"): ("Seconds", [{"service"}]),
    ("CornerShop", "RecordsGivenUp"): ("Count", [{"service"}]),
}
# Alarms on these say whether the index keeps up: missing data must be breaching.
LAG_METRICS = {("CornerShop", "SyncIndexPolls"), ("CornerShop", "StreamApplyLag"), ("AWS/Lambda", "IteratorAge")}
# The environment variables that hold secrets (shop/settings.py reads them with env_secret, or they are
# the web's own keys); each may reach a process only through ECS `Secrets` or as NAME_SECRET_ARN.
SECRET_VARIABLES = {"DJANGO_SECRET_KEY", "COMMENTS_CURSOR_KEY", "MODERATION_REPORTER_KEY", "DATABASE_PASSWORD",
                    "REDIS_PASSWORD", "PAGINATION_INDEX_RESP_PASSWORD"}


def decoded(path: Path) -> dict:
    template, problems = decode(str(path))
    assert not problems, problems
    return template


def resources(kind: str):
    for path in TEMPLATES:
        for logical_id, resource in decoded(path).get("Resources", {}).items():
            if resource["Type"] == kind:
                yield path, decoded(path), logical_id, resource


def parameter_of(template: dict, node) -> dict | None:
    if isinstance(node, dict) and set(node) == {"Ref"} and node["Ref"] in template.get("Parameters", {}):
        return template["Parameters"][node["Ref"]]
    return None


def test_cfn_lint_reports_nothing_on_any_template():
    assert {path.name for path in TEMPLATES} >= {"shop.yaml", "bootstrap.yaml", "network.yaml", "stores.yaml",
                                                 "data.yaml", "site.yaml", "alarms.yaml"}
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    result = subprocess.run([str(cfn_lint), "--include-checks", "I", "--", *map(str, TEMPLATES)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_the_nested_stacks_parameters_and_outputs_line_up():
    root = decoded(ROOT_TEMPLATE)
    stacks = {name: resource for name, resource in root["Resources"].items()
              if resource["Type"] == "AWS::CloudFormation::Stack"}
    assert {resource["Properties"]["TemplateURL"] for resource in stacks.values()} == {
        path.name for path in TEMPLATES} - {ROOT_TEMPLATE.name, BOOTSTRAP_TEMPLATE.name}
    outputs = {name: set(decoded(DIRECTORY / resource["Properties"]["TemplateURL"]).get("Outputs", {}))
               for name, resource in stacks.items()}
    for name, resource in stacks.items():
        child = decoded(DIRECTORY / resource["Properties"]["TemplateURL"])
        given = set(resource["Properties"].get("Parameters", {}))
        declared = child.get("Parameters", {})
        assert given <= set(declared), (name, given - set(declared))
        required = {parameter for parameter, spec in declared.items() if "Default" not in spec}
        assert required <= given, (name, required - given)
    # Every Fn::GetAtt Stack.Outputs.X, and every ${Stack.Outputs.X} in a Fn::Sub, names an output.
    text = ROOT_TEMPLATE.read_text()
    used = re.findall(r"(\w+)\.Outputs\.(\w+)", text)
    assert used
    for stack, output in used:
        assert output in outputs[stack], f"{stack} has no output {output}"


def test_no_secret_in_plain_text_in_any_environment():
    for path in TEMPLATES:
        text = path.read_text()
        # A dynamic reference in an environment would put the secret's value in the function's or
        # task's configuration, readable by whoever may describe it.
        for line in text.splitlines():
            if "{{resolve:" in line:
                assert re.match(r"\s*(AuthToken|MasterUserPassword):", line), \
                    f"{path.name}: a dynamic reference outside a secret-only property: {line}"
        template = decoded(path)
        for name, spec in template.get("Parameters", {}).items():
            assert not spec.get("NoEcho"), f"{path.name}: parameter {name} carries a secret; generate it in stores.yaml"
    environments = []
    for path, template, logical_id, resource in resources("AWS::Lambda::Function"):
        variables = resource["Properties"]["Environment"]["Variables"]
        environments.append((f"{path.name}:{logical_id}", set(variables), variables, set()))
    for path, template, logical_id, resource in resources("AWS::ECS::TaskDefinition"):
        for container in resource["Properties"]["ContainerDefinitions"]:
            plain = {item["Name"]: item.get("Value") for item in _items(container.get("Environment", []))}
            secret = {item["Name"] for item in _items(container.get("Secrets", []))}
            for item in _items(container.get("Secrets", [])):
                assert "ValueFrom" in item and "Value" not in item
            environments.append((f"{path.name}:{logical_id}:{container['Name']}", set(plain), plain, secret))
    assert len(environments) >= 4
    for where, names, values, secret in environments:
        assert not names & SECRET_VARIABLES, f"{where}: {names & SECRET_VARIABLES} in plain environment"
        assert not {name for name in names if re.search(r"PASSWORD$|TOKEN$|SECRET$|_KEY$|_FALLBACKS$", name)}, where
        assert {"DJANGO_SECRET_KEY", "DJANGO_SECRET_KEY_SECRET_ARN"} & (secret | names), f"{where}: no secret key"
        if "DATABASE_URL" in values:
            assert "DATABASE_PASSWORD" in secret or "DATABASE_PASSWORD_SECRET_ARN" in names, where
    # The URLs given to the processes hold no password: the root stack writes them without one, and
    # data.yaml refuses one that has it.
    root = ROOT_TEMPLATE.read_text()
    assert re.findall(r"postgres://(\w+)@", root) and not re.search(r"postgres://[^@\s]*:[^@\s]*@", root)
    assert not re.search(r"rediss?://[^/\s]*@", root)
    pattern = decoded(TEMPLATE)["Parameters"]["DatabaseUrl"]["AllowedPattern"]
    assert re.fullmatch(pattern, "postgres://shop@db.example:5432/shop")
    assert not re.fullmatch(pattern, "postgres://shop:hunter2@db.example:5432/shop")


def _items(node) -> list[dict]:
    """A list of environment entries, each one that is an Fn::If taken both ways."""
    found = []
    for item in node:
        if isinstance(item, dict) and set(item) == {"Fn::If"}:
            found += [branch for branch in item["Fn::If"][1:] if isinstance(branch, dict) and "Name" in branch]
        else:
            found.append(item)
    return found


def test_every_stream_mapping_bounds_a_records_age_well_below_the_streams_retention():
    mappings = list(resources("AWS::Lambda::EventSourceMapping"))
    assert mappings
    for path, template, logical_id, resource in mappings:
        properties = resource["Properties"]
        age = properties["MaximumRecordAgeInSeconds"]
        parameter = parameter_of(template, age)
        if parameter:
            assert parameter["Default"] <= MAX_RECORD_AGE_SECONDS, (logical_id, parameter)
            assert parameter["MaxValue"] <= MAX_RECORD_AGE_SECONDS, (logical_id, parameter)
            assert parameter["MinValue"] >= 60
        else:
            assert 60 <= age <= MAX_RECORD_AGE_SECONDS, (logical_id, age)
        assert properties["BisectBatchOnFunctionError"] is True
        assert properties["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        destination = properties["DestinationConfig"]["OnFailure"]["Destination"]
        # The on-failure destination is a queue the operator's role can read (repair_index_failures).
        queue = destination["Fn::GetAtt"][0]
        operator = role_policies()["operator"]
        reads = [statement for document in operator for statement in document["Statement"]
                 if "sqs:ReceiveMessage" in statement["Action"]]
        assert reads and all(statement["Resource"].endswith(f":{queue}") for statement in reads), reads


def alarm_metrics(properties: dict) -> list[dict]:
    """The metrics an alarm watches: its own, or each MetricStat of its metric math."""
    if "MetricName" in properties:
        return [{"Namespace": properties["Namespace"], "MetricName": properties["MetricName"],
                 "Dimensions": properties.get("Dimensions", [])}]
    found = [query["MetricStat"]["Metric"] for query in properties["Metrics"] if "MetricStat" in query]
    assert found and all("Expression" in query or "MetricStat" in query for query in properties["Metrics"])
    return found


def alarms():
    found = list(resources("AWS::CloudWatch::Alarm"))
    assert len(found) >= 8
    return found


def test_every_alarm_watches_a_metric_as_it_is_published():
    for path, template, logical_id, resource in alarms():
        properties = resource["Properties"]
        for metric in alarm_metrics(properties):
            key = (metric["Namespace"], metric["MetricName"])
            assert key in KNOWN_METRICS, f"{logical_id}: {key} is no metric this test knows AWS publishes"
            unit, dimension_sets = KNOWN_METRICS[key]
            dimensions = {dimension["Name"] for dimension in metric.get("Dimensions", [])}
            assert dimensions in dimension_sets, f"{logical_id}: {key} is not published with {dimensions}"
            if unit == "Milliseconds":  # the threshold must be milliseconds too (10 s at least)
                parameter = parameter_of(template, properties["Threshold"])
                threshold = parameter["Default"] if parameter else properties["Threshold"]
                assert threshold >= 10_000, (logical_id, threshold)
                assert parameter is None or parameter["MinValue"] >= 10_000
            if unit == "Bytes":  # and bytes: a number of GiB or MiB would never fire (1 GiB at least)
                assert "MetricName" in properties, f"{logical_id}: a byte threshold on metric math"
                parameter = parameter_of(template, properties["Threshold"])
                threshold = parameter["Default"] if parameter else properties["Threshold"]
                assert threshold >= 2**30, (logical_id, threshold)
                assert parameter is None or parameter["MinValue"] >= 2**30
            if unit == "Percent":
                assert 0 < properties["Threshold"] < 100, logical_id
        if "Unit" in properties:
            assert properties["Unit"] == KNOWN_METRICS[(properties["Namespace"], properties["MetricName"])][0]


def test_lag_and_heartbeat_alarms_treat_missing_data_as_breaching():
    watched = set()
    for path, template, logical_id, resource in alarms():
        properties = resource["Properties"]
        keys = {(metric["Namespace"], metric["MetricName"]) for metric in alarm_metrics(properties)}
        watched |= keys
        if keys & LAG_METRICS:
            assert properties["TreatMissingData"] == "breaching", logical_id
    assert LAG_METRICS <= watched
    heartbeat = [resource for path, template, logical_id, resource in alarms()
                 if resource["Properties"].get("MetricName") == "SyncIndexPolls"]
    assert len(heartbeat) == 1
    assert heartbeat[0]["Properties"]["TreatMissingData"] == "breaching"
    assert heartbeat[0]["Properties"]["ComparisonOperator"] == "LessThanThreshold"


def test_throttle_alarms_cover_both_tables():
    tables = set()
    for path, template, logical_id, resource in alarms():
        for metric in alarm_metrics(resource["Properties"]):
            if metric["MetricName"].endswith("ThrottleEvents"):
                tables |= {str(dimension["Value"]) for dimension in metric["Dimensions"]
                           if dimension["Name"] == "TableName"}
    assert tables == {"{'Ref': 'CommentsTableName'}", "{'Ref': 'IndexTableName'}"}


def test_the_redis_alarms_watch_every_member_of_the_replication_group():
    """ElastiCache publishes per member cluster (ID-001, ID-002... for cluster mode disabled), and a
    failover swaps which one is the primary: each Redis alarm takes every member stores.yaml makes."""
    members = decoded(DIRECTORY / "stores.yaml")["Resources"]["Redis"]["Properties"]["NumCacheClusters"]
    expected = [{"Fn::Sub": f"${{RedisReplicationGroupId}}-{number:03d}"} for number in range(1, members + 1)]
    found = 0
    for path, template, logical_id, resource in alarms():
        metrics = alarm_metrics(resource["Properties"])
        if metrics[0]["Namespace"] != "AWS/ElastiCache":
            continue
        found += 1
        assert resource["Condition"] == "WithRedis"
        names = [dimension["Value"] for metric in metrics for dimension in metric["Dimensions"]]
        assert names == expected, logical_id
    assert found == 2


def test_every_alarm_links_its_runbook():
    linked = set()
    for path, template, logical_id, resource in alarms():
        description = resource["Properties"]["AlarmDescription"]
        text = description["Fn::Sub"] if isinstance(description, dict) else description
        match = re.search(r"Runbook: \$\{RunbookBaseUrl\}/([a-z0-9-]+\.md)$", text)
        assert match, f"{logical_id}: no runbook link at the end of its description"
        page = RUNBOOKS / match[1]
        assert page.is_file(), f"{logical_id}: {page} is missing"
        assert logical_id in page.read_text(), f"{page.name} does not name the alarm {logical_id}"
        linked.add(match[1])
    assert linked == {page.name for page in RUNBOOKS.glob("*.md")} - {"README.md", "restore.md",
                                                                       "secret-rotation.md"}
    # The stores' and the Lambda's own alarms (the review's "no RDS alarms and no Lambda Errors alarm").
    assert {"lambda-errors.md", "database-storage.md", "database-cpu.md", "database-connections.md",
            "redis-cpu.md", "redis-memory.md"} <= linked


def test_the_region_is_the_stacks_own():
    for path in TEMPLATES:
        assert not re.search(r"\b[a-z]{2}-[a-z]+-\d\b", path.read_text()), f"{path.name} names a region"


def test_every_role_of_every_template_is_enforced():
    """The shop's roles are enforced call by call (tests/deploy/test_roles.py and the AWS-actions
    plugin); an AWS service's role grants only actions ON_BEHALF lists, each with its reason."""
    found = {(path.name, logical_id) for path, _, logical_id, _ in resources("AWS::IAM::Role")}
    shop = {(TEMPLATE.name, logical_id) for logical_id in ROLES.values()}
    assert found == shop | set(SERVICE_ROLES)
    for (name, logical_id), component in SERVICE_ROLES.items():
        template = load(DIRECTORY / name)
        documents = role_policies(template=template, roles={component: logical_id},
                                  parameters=_required_parameters(template))[component]
        granted = granted_actions(documents)
        assert granted and granted <= set(ON_BEHALF[component]), (component, granted - set(ON_BEHALF[component]))


def _required_parameters(template: dict) -> dict:
    """Stand-ins for the parameters without a default (the secrets' ARNs and the like)."""
    return {name: f"arn:aws:secretsmanager:eu-west-1:123456789012:secret:{name}-AbCdEf"
            for name, spec in template["Parameters"].items() if "Default" not in spec and spec["Type"] == "String"}


def test_the_comments_table_is_the_one_create_tables_makes(settings):
    use_table(settings, "comments")
    template = load()
    declared = Resolver(template).value(template["Resources"]["CommentsTable"]["Properties"])
    made = table_definition()
    assert declared["TableName"] == made["TableName"]
    assert declared["KeySchema"] == made["KeySchema"]
    assert sorted(declared["AttributeDefinitions"], key=str) == sorted(made["AttributeDefinitions"], key=str)
    assert sorted(declared["GlobalSecondaryIndexes"], key=str) == sorted(made["GlobalSecondaryIndexes"], key=str)
    assert declared["BillingMode"] == made["BillingMode"] == "PAY_PER_REQUEST"
    assert declared["StreamSpecification"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"
    assert declared["DeletionProtectionEnabled"] is made["DeletionProtectionEnabled"] is True
    assert declared["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_the_backend_parameter_decides_what_is_made_and_granted():
    template = load()
    for backend, table, bucket in (("dynamodb", True, False), ("files", False, True), ("relational", False, False)):
        resolver = Resolver(template, parameters={"IndexBackend": backend})
        assert (resolver.exists("IndexTable"), resolver.exists("IndexBucket")) == (table, bucket), backend
        policies = role_policies(parameters={"IndexBackend": backend})
        text = str(policies)
        assert ("table/comments-pidx" in text) == table
        assert ("s3:" in text) == bucket


def test_every_role_reading_the_files_bucket_may_list_it():
    """Without s3:ListBucket a GET of a missing key is 403 AccessDenied, not 404 (GetObject API
    reference, "Permissions"): a group with no manifest would read as an outage."""
    policies = role_policies(parameters={"IndexBackend": "files"}, physical={"IndexBucket": "bucket"})
    for component, documents in policies.items():
        statements = [statement for document in documents for statement in document["Statement"]]
        reads = [s for s in statements if "s3:GetObject" in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])]
        lists = [s for s in statements if s["Action"] == "s3:ListBucket"]
        assert bool(reads) == bool(lists), component
        for statement in lists:
            assert statement["Resource"] == "arn:aws:s3:::bucket"


@pytest.mark.parametrize("consumer", ["lambda", "service"])
def test_the_lambda_reads_its_secrets_and_nothing_else(consumer):
    parameters = {"StreamConsumer": consumer, **_required_parameters(load())}
    documents = role_policies(parameters=parameters)["stream"]
    statements = [statement for document in documents for statement in document["Statement"]
                  if statement["Action"] == "secretsmanager:GetSecretValue"]
    if consumer == "service":  # ECS injects the task's secrets with the execution role
        assert statements == []
        return
    (statement,) = statements
    assert sorted(statement["Resource"]) == sorted([parameters["DjangoSecretKeyArn"],
                                                   parameters["DatabasePasswordSecretArn"]])


def test_the_mapping_has_the_flags_the_handler_relies_on():
    mapping = load()["Resources"]["SyncIndexMapping"]["Properties"]
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BisectBatchOnFunctionError"] is True
    assert {"MaximumRetryAttempts", "MaximumRecordAgeInSeconds"} <= set(mapping)
    assert mapping["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": ["StreamFailureQueue", "Arn"]}
    assert load()["Resources"]["SyncIndexFunction"]["Properties"]["Handler"] == "pagination_index.aws_lambda.handler"
