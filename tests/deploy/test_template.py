"""deploy/aws/template.yaml: cfn-lint finds nothing (errors, warnings or informational), and the
table it declares is the one `create_tables` makes."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from comments.table.schema import table_definition
from deploy.aws.template import TEMPLATE, Resolver, load, role_policies
from tests.config import use_table


def test_cfn_lint_reports_nothing():
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    result = subprocess.run([str(cfn_lint), "--include-checks", "I", "--", str(TEMPLATE)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


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


def test_the_mapping_has_the_flags_the_handler_relies_on():
    mapping = load()["Resources"]["SyncIndexMapping"]["Properties"]
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BisectBatchOnFunctionError"] is True
    assert {"MaximumRetryAttempts", "MaximumRecordAgeInSeconds"} <= set(mapping)
    assert mapping["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": ["StreamFailureQueue", "Arn"]}
    assert load()["Resources"]["SyncIndexFunction"]["Properties"]["Handler"] == "pagination_index.aws_lambda.handler"
