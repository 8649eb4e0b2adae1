"""What the strict endpoint costs per request: client latency, the endpoint's own CPU and DynamoDB
Local's CPU per GetItem, Query (21 items) and PutItem, sent straight to DynamoDB Local, through the
endpoint (TLS, SigV4 check, metering: its reads of old items), and through it with metering off.
One client thread, sequential requests. Not part of `make bench`; cited by docs/testing.md.

    python -m bench.strict_endpoint [--requests N] [--smoke]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

import boto3
import botocore
from botocore.config import Config

from bench.common import DYNAMODB_LOCAL, format_table, machine_info, shown, stamp, write_json
from stack.dynamodb_local import DynamoDBLocal
from stack.strict_endpoint import StrictEndpoint

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def make_client(url: str, **kwargs):
    return boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1",
                        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}), **kwargs)


def operations(ddb, table: str) -> dict:
    counter = iter(range(10**9))
    return {
        "GetItem": lambda: ddb.get_item(TableName=table, Key={"PK": {"S": "hot"}, "SK": {"S": "0100"}}),
        "Query (21 items)": lambda: ddb.query(TableName=table, KeyConditionExpression="PK = :p", Limit=21,
                                              ExpressionAttributeValues={":p": {"S": "hot"}}, ScanIndexForward=False),
        "PutItem": lambda: ddb.put_item(TableName=table, Item={"PK": {"S": f"w{next(counter)}"}, "SK": {"S": "0"},
                                                               "body": {"S": "x" * 300}}),
    }


def measure(call, count: int, pids: dict[str, int]) -> dict:
    call()  # a warm connection
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    cpu = {name: (cpu_seconds(pid) - before[name]) / count * 1000 for name, pid in pids.items()}
    return {"p50_ms": statistics.median(times) * 1000, "mean_ms": statistics.fmean(times) * 1000,
            **{f"{name}_cpu_ms_per_request": value for name, value in cpu.items()}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    count = 40 if args.smoke else args.requests
    load_at_start = os.getloadavg()
    table = f"bench-strict-{uuid.uuid4().hex[:8]}"
    results = []
    with DynamoDBLocal() as database, StrictEndpoint(database.endpoint_url, config={"creating_seconds": 0}) as endpoint:
        direct = make_client(database.endpoint_url, aws_access_key_id="local", aws_secret_access_key="local")
        strict = make_client(endpoint.url, aws_access_key_id=endpoint.access_key_id,
                             aws_secret_access_key=endpoint.secret_access_key, verify=endpoint.ca_bundle)
        direct.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
                            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"},
                                                  {"AttributeName": "SK", "AttributeType": "S"}])
        for number in range(200):
            direct.put_item(TableName=table, Item={"PK": {"S": "hot"}, "SK": {"S": f"{number:04}"}, "body": {"S": "x" * 300}})
        pids = {"endpoint": endpoint.process.pid, "dynamodb_local": database.process.pid}
        for path, ddb, metering in (("direct", direct, None), ("strict", strict, True), ("strict, metering off", strict, False)):
            if metering is not None:
                endpoint.configure(metering=metering)
            for name, call in operations(ddb, table).items():
                figures = measure(call, count, pids)
                results.append({"path": path, "operation": name, "requests": count, **figures})
                print(f"{path:22} {name:17} p50 {figures['p50_ms']:.2f} ms", flush=True)
    rows = [[r["path"], r["operation"], f"{r['p50_ms']:.2f}", f"{r['endpoint_cpu_ms_per_request']:.2f}",
             f"{r['dynamodb_local_cpu_ms_per_request']:.2f}"] for r in results]
    print(format_table(["path", "operation", "p50 ms", "endpoint CPU ms/req", "DynamoDB Local CPU ms/req"], rows, left=2))
    when = stamp()
    path = write_json("strict_endpoint", args.smoke, when, {
        "machine": machine_info({"botocore": botocore.__version__}, load_at_start,
                                f"{DYNAMODB_LOCAL}; one client thread; the machine is shared (see load averages)"),
        "results": results})
    print(f"wrote {shown(path)}")


if __name__ == "__main__":
    main()
