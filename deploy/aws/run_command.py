"""Runs one `manage.py` command on AWS as an ECS task of the stack's operator task definition
(deploy/aws/site.yaml: the shop's image, the stack's settings and secrets, OperatorRole), waits for it
and prints its log and exit code:

    python -m deploy.aws.run_command --stack shop -- verify_index --sample 1000

The cluster, task definition, subnets and security group are the root stack's outputs. The region and
credentials are boto3's own (AWS_REGION, a profile, ...): the operator's, allowed ecs:RunTask and
iam:PassRole on the stack's roles.
"""
from __future__ import annotations

import argparse
import sys
import time

CONTAINER = "operator"  # site.yaml's OperatorTask container


def stack_outputs(cloudformation, stack: str) -> dict[str, str]:
    (described,) = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    return {output["OutputKey"]: output["OutputValue"] for output in described.get("Outputs", [])}


def run_task_request(outputs: dict[str, str], command: list[str], settings: dict[str, str] | None = None) -> dict:
    """The RunTask request for `manage.py <command>` with the stack's outputs, and `settings` (environment
    variables) over the task definition's."""
    override = {"name": CONTAINER, "command": ["python", "manage.py", *command]}
    if settings:
        override["environment"] = [{"name": name, "value": value} for name, value in settings.items()]
    return {
        "cluster": outputs["ClusterName"],
        "taskDefinition": outputs["OperatorTaskDefinition"],
        "launchType": "FARGATE",
        "count": 1,
        "networkConfiguration": {"awsvpcConfiguration": {
            "subnets": outputs["PrivateSubnetIds"].split(","),
            "securityGroups": [outputs["AppSecurityGroupId"]],
            "assignPublicIp": "DISABLED",
        }},
        "overrides": {"containerOverrides": [override]},
        "startedBy": "deploy.aws.run_command",
    }


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str], dict[str, str]]:
    """(the options, the manage.py command with its arguments, the settings to override)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", required=True, help="The root stack's name (shop.yaml).")
    parser.add_argument("--no-wait", action="store_true", help="Start the task and print its ARN only.")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="An environment variable over the task definition's (e.g. PAGINATION_INDEX_BACKEND=dynamodb "
                             "to build the next backend); repeat for more. Shown in the task's description: no lasting secret "
                             "(the stack's secrets reach the task from Secrets Manager).")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="The manage.py command and its arguments, after --.")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the manage.py command after --")
    settings = {}
    for item in args.setting:
        name, equals, value = item.partition("=")
        if not (equals and name.isupper()):
            parser.error(f"--setting takes NAME=VALUE, not {item!r}")
        settings[name] = value
    return args, command, settings


def main(argv: list[str] | None = None) -> int:
    args, command, settings = parse(argv)

    import boto3

    outputs = stack_outputs(boto3.client("cloudformation"), args.stack)
    ecs = boto3.client("ecs")
    started = ecs.run_task(**run_task_request(outputs, command, settings))
    if started.get("failures"):
        print(started["failures"], file=sys.stderr)
        return 1
    task = started["tasks"][0]["taskArn"]
    print(task)
    if args.no_wait:
        return 0
    ecs.get_waiter("tasks_stopped").wait(cluster=outputs["ClusterName"], tasks=[task],
                                         WaiterConfig={"Delay": 15, "MaxAttempts": 24 * 240})  # up to a day
    (stopped,) = ecs.describe_tasks(cluster=outputs["ClusterName"], tasks=[task])["tasks"]
    container = next(c for c in stopped["containers"] if c["name"] == CONTAINER)
    _print_log(stopped, outputs)
    code = container.get("exitCode")
    print(f"exit code {code} ({stopped.get('stoppedReason', '')})", file=sys.stderr)
    return 1 if code is None else code


def _print_log(task: dict, outputs: dict[str, str]) -> None:
    import boto3

    task_id = task["taskArn"].rsplit("/", 1)[1]
    group = outputs["OperatorLogGroup"]
    logs = boto3.client("logs")
    try:
        for event in logs.get_paginator("filter_log_events").paginate(
                logGroupName=group, logStreamNames=[f"operator/{CONTAINER}/{task_id}"],
                startTime=int((time.time() - 86400) * 1000)).search("events[]"):
            print(event["message"])
    except logs.exceptions.ResourceNotFoundException:
        print(f"(no log in {group}: see the task in the ECS console)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
