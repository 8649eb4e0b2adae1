"""Secrets reach the stream Lambda by reference, never in its environment (deploy/aws/data.yaml): its
settings read DJANGO_SECRET_KEY, the database password and the Redis password from Secrets Manager
(moto's server here) at start-up, in the forms the template writes them (ECS's `ARN:json-key::` for
RDS's JSON secret); and in Lambda, settings refuse to start without DATABASE_URL instead of using an
unmigrated SQLite file in /tmp. Checked in fresh processes, as a Lambda environment starts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from tests.deploy.aws_actions import ROOT

PROBE = ("import json, django; from django.conf import settings; django.setup(); "
         "print(json.dumps({'key': settings.SECRET_KEY, 'db': settings.DATABASES['default'], "
         "'redis': settings.REDIS_URL, 'index_redis': settings.PAGINATION_INDEX_REDIS_URL}, default=str))")


def start(env: dict) -> subprocess.CompletedProcess:
    clean = {"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "shop.settings", "AWS_REGION": "eu-west-1",
             "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", **env}
    return subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=clean, capture_output=True, text=True,
                          timeout=120)


def test_the_lambda_reads_its_secrets_from_secrets_manager_at_start(s3_server):
    import boto3

    client = boto3.client("secretsmanager", endpoint_url=s3_server.url, region_name="eu-west-1",
                          aws_access_key_id="local", aws_secret_access_key="local")
    name = uuid.uuid4().hex[:8]
    key = client.create_secret(Name=f"key-{name}", SecretString="k" * 64)["ARN"]
    # As stores.yaml generates it: {"username", "password"}; a password with URL-special characters.
    database = client.create_secret(Name=f"db-{name}", SecretString=json.dumps(
        {"username": "shop", "password": "p@ss:/word"}))["ARN"]
    redis = client.create_secret(Name=f"redis-{name}", SecretString="token123")["ARN"]
    started = start({
        "AWS_ENDPOINT_URL_SECRETS_MANAGER": s3_server.url, "AWS_LAMBDA_FUNCTION_NAME": "shop-sync-index",
        "DJANGO_SECRET_KEY_SECRET_ARN": key,
        "DATABASE_URL": "postgres://shop@127.0.0.1:5432/test",
        "DATABASE_PASSWORD_SECRET_ARN": f"{database}:password::",
        "REDIS_URL": "rediss://cache.example:6379/0", "REDIS_PASSWORD_SECRET_ARN": redis,
    })
    assert started.returncode == 0, started.stderr[-3000:]
    seen = json.loads(started.stdout.strip().splitlines()[-1])
    assert seen["key"] == "k" * 64
    assert (seen["db"]["USER"], seen["db"]["PASSWORD"], seen["db"]["HOST"]) == ("shop", "p@ss:/word", "127.0.0.1")
    assert seen["redis"] == "rediss://:token123@cache.example:6379/0"
    assert seen["index_redis"] == "rediss://:token123@cache.example:6379/1"


def test_a_value_in_the_environment_wins_and_needs_no_secrets_manager():
    """ECS injects the tasks' secrets as plain variables: no call is made (there is no endpoint here)."""
    started = start({"DJANGO_SECRET_KEY": "e" * 50, "DJANGO_SECRET_KEY_SECRET_ARN": "arn:aws:secretsmanager:x",
                     "DATABASE_URL": "postgres://shop@db:5432/shop", "DATABASE_PASSWORD": "from-ecs"})
    assert started.returncode == 0, started.stderr[-3000:]
    seen = json.loads(started.stdout.strip().splitlines()[-1])
    assert seen["key"] == "e" * 50 and seen["db"]["PASSWORD"] == "from-ecs"


def test_the_lambda_refuses_to_start_without_a_database_url():
    started = start({"AWS_LAMBDA_FUNCTION_NAME": "shop-sync-index", "DJANGO_SECRET_KEY": "e" * 50,
                     "SHOP_VAR_DIR": "/tmp"})
    assert started.returncode != 0
    assert "DATABASE_URL is not set" in started.stderr
    # Outside Lambda the local default (SQLite under SHOP_VAR_DIR) still serves development.
    assert start({"DJANGO_SECRET_KEY": "e" * 50}).returncode == 0


def test_on_ecs_the_tasks_own_address_is_an_allowed_host(tmp_path):
    """An ALB's health checks send the target's IP as Host: the task reads its addresses from the
    container metadata endpoint (served here by a real HTTP server with ECS's answer's shape)."""
    import http.server
    import threading

    answer = json.dumps({"DockerName": "web", "Networks": [{"NetworkMode": "awsvpc",
                                                            "IPv4Addresses": ["10.40.128.17"]}]}).encode()

    class Metadata(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        probe = ("import django; from django.conf import settings; django.setup(); "
                 "print(settings.ALLOWED_HOSTS)")
        started = subprocess.run(
            [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
            env={"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "shop.settings", "DJANGO_SECRET_KEY": "e" * 50,
                 "DJANGO_ALLOWED_HOSTS": "shop.example.com",
                 "ECS_CONTAINER_METADATA_URI_V4": f"http://127.0.0.1:{server.server_port}/v4/abc"})
    finally:
        server.shutdown()
    assert started.returncode == 0, started.stderr[-2000:]
    assert started.stdout.strip().splitlines()[-1] == "['shop.example.com', '10.40.128.17']"
