"""deploy/aws/run_command.py builds its RunTask request from the root stack's outputs: every output it
reads is one shop.yaml declares, and the command runs in site.yaml's operator container."""
from deploy.aws.run_command import CONTAINER, run_task_request
from deploy.aws.template import DIRECTORY, ROOT_TEMPLATE, load


def test_the_request_uses_only_the_root_stacks_outputs_and_the_operator_container():
    declared = set(load(ROOT_TEMPLATE)["Outputs"])
    read = set()

    class Outputs(dict):
        def __getitem__(self, key):
            read.add(key)
            return {"PrivateSubnetIds": "subnet-1,subnet-2"}.get(key, f"<{key}>")

    request = run_task_request(Outputs(), ["verify_index", "--sample", "10"])
    assert read <= declared, read - declared
    assert request["networkConfiguration"]["awsvpcConfiguration"]["subnets"] == ["subnet-1", "subnet-2"]
    (override,) = request["overrides"]["containerOverrides"]
    assert override == {"name": CONTAINER, "command": ["python", "manage.py", "verify_index", "--sample", "10"]}
    operator = load(DIRECTORY / "site.yaml")["Resources"]["OperatorTask"]["Properties"]
    assert [c["Name"] for c in operator["ContainerDefinitions"]] == [CONTAINER]
    assert "OperatorLogGroup" in declared
