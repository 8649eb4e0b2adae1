"""What each DynamoDB and DynamoDB Streams operation touches: its tables (and index), and the IAM
actions and resource ARNs it needs, as AWS's Service Authorization Reference and DynamoDB's developer
guide name them ("Using IAM with DynamoDB transactions": a transaction's items are authorized as
PutItem, UpdateItem, DeleteItem, GetItem and ConditionCheckItem on each item's table)."""
from __future__ import annotations

import re

TRANSACT_WRITE_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                          "ConditionCheck": "ConditionCheckItem"}
# Operations on no particular table: their resource is "*".
ACCOUNT_WIDE = {"ListTables", "DescribeLimits", "DescribeEndpoints", "ListBackups", "ListGlobalTables",
                "ListExports", "ListImports", "ListContributorInsights", "ListStreams"}
STREAM_ARN = re.compile(r"arn:aws[\w-]*:dynamodb:[^:]*:[^:]*:table/([^/|]+)/stream/([^|/\s]+)")
PARTIQL_VERB = re.compile(r"^\s*(?:EXISTS\s*\(\s*)?(SELECT|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
PARTIQL_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE)\s+\"([^\"]+)\"(?:\.\"([^\"]+)\")?", re.IGNORECASE)
PARTIQL_ACTIONS = {"SELECT": "PartiQLSelect", "INSERT": "PartiQLInsert", "UPDATE": "PartiQLUpdate",
                   "DELETE": "PartiQLDelete"}


def table_arn(region: str, account: str, table: str, index: str | None = None) -> str:
    arn = f"arn:aws:dynamodb:{region}:{account}:table/{table}"
    return f"{arn}/index/{index}" if index else arn


def stream_label(stream_arn: str) -> tuple[str, str] | None:
    """(table, label) of a stream ARN, or of a shard iterator that starts with one (DynamoDB Local's do)."""
    match = STREAM_ARN.search(stream_arn or "")
    return (match[1], match[2]) if match else None


def tables_of(operation: str, params: dict) -> list[str]:
    """The tables a DynamoDB request touches, in order of first mention."""
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return list(params.get("RequestItems", {}))
    if operation in ("TransactWriteItems", "TransactGetItems"):
        names = [next(iter(item.values())).get("TableName") for item in params.get("TransactItems", [])]
        return list(dict.fromkeys(name for name in names if name))
    if operation in ("ExecuteStatement", "BatchExecuteStatement", "ExecuteTransaction"):
        found = (PARTIQL_TABLE.search(statement) for statement in _statements(operation, params))
        return list(dict.fromkeys(match[1] for match in found if match))
    if "TableName" in params:
        return [params["TableName"]]
    if "ResourceArn" in params and "table/" in params["ResourceArn"]:
        return [params["ResourceArn"].split("table/", 1)[1].split("/")[0]]
    return []


def requested_actions(service: str, operation: str, params: dict, *, region: str, account: str) -> list[tuple[str, str]]:
    """(IAM action, resource ARN) pairs a request needs; every one must be allowed."""
    if service == "streams":
        if operation == "ListStreams":
            return [("dynamodb:ListStreams", "*")]
        found = stream_label(params.get("StreamArn") or params.get("ShardIterator", ""))
        resource = f"{table_arn(region, account, found[0])}/stream/{found[1]}" if found else "*"
        return [(f"dynamodb:{operation}", resource)]
    if operation in ACCOUNT_WIDE:
        return [(f"dynamodb:{operation}", "*")]
    if operation == "TransactWriteItems":
        pairs = []
        for item in params.get("TransactItems", []):
            (kind, body), = item.items()
            pairs.append((f"dynamodb:{TRANSACT_WRITE_ACTIONS[kind]}", table_arn(region, account, body["TableName"])))
        return list(dict.fromkeys(pairs))
    if operation == "TransactGetItems":
        return list(dict.fromkeys(("dynamodb:GetItem", table_arn(region, account, item["Get"]["TableName"]))
                                  for item in params.get("TransactItems", [])))
    if operation in ("ExecuteStatement", "BatchExecuteStatement", "ExecuteTransaction"):
        pairs = []
        for statement in _statements(operation, params):
            verb, target = PARTIQL_VERB.match(statement), PARTIQL_TABLE.search(statement)
            action = f"dynamodb:{PARTIQL_ACTIONS[verb[1].upper()]}" if verb else "dynamodb:PartiQLSelect"
            pairs.append((action, table_arn(region, account, target[1], target[2]) if target else "*"))
        return list(dict.fromkeys(pairs))
    index = params.get("IndexName") if operation in ("Query", "Scan") else None
    tables = tables_of(operation, params)
    return [(f"dynamodb:{operation}", table_arn(region, account, table, index)) for table in tables] or \
        [(f"dynamodb:{operation}", "*")]


def _statements(operation: str, params: dict) -> list[str]:
    """The PartiQL statements of a request (each is authorized as PartiQLSelect/Insert/Update/Delete)."""
    if operation == "ExecuteStatement":
        return [params.get("Statement", "")]
    key = "Statements" if operation == "BatchExecuteStatement" else "TransactStatements"
    return [entry.get("Statement", "") for entry in params.get(key, [])]
