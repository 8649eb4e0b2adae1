"""`make run`: DynamoDB Local on disk, migrations, table, demo data, index, then the web server and
sync_index side by side until Ctrl-C stops them all; with PAGINATION_INDEX_BACKEND=resp, serve_index
first (the files index over RESP, at PAGINATION_INDEX_RESP_URL), stopped last."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.core.management.base import CommandError

from stack.dynamodb_local import ROOT, DynamoDBLocal, DynamoDBLocalError, is_up
from stack.strict_endpoint import StrictEndpoint, StrictEndpointError

VAR = Path(os.environ.get("SHOP_VAR_DIR", ROOT / "var")).resolve()  # as shop/settings.py reads it
DYNAMODB_PORT = int(os.environ.get("DYNAMODB_LOCAL_PORT", "8001"))
# STRICT_DYNAMODB=1: the site and sync_index reach DynamoDB Local through the strict endpoint
# (stack/strict_endpoint/: TLS, SigV4 checks, AWS's errors), with credentials it issued.
STRICT = os.environ.get("STRICT_DYNAMODB", "").lower() in {"1", "true", "yes"}
WEB_ADDRESS = os.environ.get("WEB_ADDRESS", "127.0.0.1:8000")


def prepare(env: dict) -> None:
    """Migrate, create the table, seed, catch the index up: in this process, to start in seconds."""
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    call_command("create_tables", backfill=True)  # an older var/ gets the byRating GSI and PK2R
    call_command("seed_demo", if_empty=True)
    call_command("sync_index", once=True, verbosity=0)
    call_command("rebuild_index", if_empty=True)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, `kill`, the terminal closing


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def start(command: list[str], env: dict) -> subprocess.Popen:
    """A child in a process group of its own: a Ctrl-C reaches only this process, which passes
    exactly one signal on. In the terminal's group the child would get the terminal's SIGINT and then
    ours too, and a second signal means "stop at once" to sync_index, so it would skip its clean stop."""
    return subprocess.Popen([sys.executable, "manage.py", *command], cwd=ROOT, env=env, process_group=0)


def stop_children(children: list[subprocess.Popen], grace: float = 15) -> None:
    """Send each child's group the SIGINT a Ctrl-C would have sent it (runserver and its autoreloaded
    child quit quietly, sync_index releases its shard leases), once; SIGKILL what is left after `grace`."""
    for child in children:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGINT)
    deadline = time.monotonic() + grace
    for child in children:
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def start_index_server(env: dict) -> subprocess.Popen | None:
    """serve_index, when the backend is resp, listening where PAGINATION_INDEX_RESP_URL points; once it
    answers PING. None for every other backend."""
    if env.get("PAGINATION_INDEX_BACKEND") != "resp":
        return None
    import redis
    from urllib.parse import urlsplit

    url = env.get("PAGINATION_INDEX_RESP_URL", "redis://127.0.0.1:6380/0")
    parts = urlsplit(url)
    server = start(["serve_index", "--bind", parts.hostname or "127.0.0.1", "--port", str(parts.port or 6379)], env)
    client = redis.Redis.from_url(url, password=env.get("PAGINATION_INDEX_RESP_PASSWORD") or None,
                                  socket_connect_timeout=0.5, socket_timeout=2)
    for _ in range(300):
        try:
            client.ping()
            return server
        except redis.RedisError:
            if server.poll() is not None:
                break
            time.sleep(0.1)
    stop_children([server])
    raise CommandError(f"serve_index did not answer at {url} (see its output above)")


def main() -> int:
    for signum in STOP_SIGNALS:  # `kill` or a closed terminal stops everything as cleanly as Ctrl-C
        signal.signal(signum, _interrupt)
    VAR.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DYNAMODB_ENDPOINT_URL=f"http://127.0.0.1:{DYNAMODB_PORT}", PYTHONUNBUFFERED="1")
    env.setdefault("DJANGO_DEBUG", "1")
    database = None
    if is_up(DYNAMODB_PORT):
        print(f"DynamoDB Local already answers on port {DYNAMODB_PORT}: using it")
    else:
        database = DynamoDBLocal(DYNAMODB_PORT, db_path=VAR / "dynamodb", log_path=VAR / "dynamodb.log")
        print(f"starting DynamoDB Local on 127.0.0.1:{DYNAMODB_PORT} (data in {VAR / 'dynamodb'})")
        database.start()
    children: list[subprocess.Popen] = []
    strict = index_server = None
    try:
        if STRICT:
            strict = StrictEndpoint(env["DYNAMODB_ENDPOINT_URL"], log_path=VAR / "strict-endpoint.log").start()
            env.update(strict.env())
            print(f"strict endpoint {strict.url} in front of DynamoDB Local (admin {strict.admin_url}, "
                  f"log {VAR / 'strict-endpoint.log'})", flush=True)
        index_server = start_index_server(env)
        prepare(env)
        print(f"serving http://{WEB_ADDRESS}/ (Ctrl-C stops the site, sync_index"
              f"{', serve_index' if index_server else ''} and DynamoDB Local)")
        children.append(start(["runserver", WEB_ADDRESS], env))
        children.append(start(["sync_index"], env))
        while all(child.poll() is None for child in children + [index_server] if child):
            time.sleep(0.5)
        return 1  # a child died on its own
    except KeyboardInterrupt:
        return 0
    except (CommandError, DynamoDBLocalError, StrictEndpointError) as exc:
        print(f"make run: {exc}", file=sys.stderr)
        return 1
    finally:
        # Clean-up must finish even if the user signals again: ignore further signals meanwhile.
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        stop_children(children)
        if index_server:  # after sync_index, whose last batch it serves
            stop_children([index_server])
        if strict:
            strict.stop()
        if database:
            database.stop()


if __name__ == "__main__":
    sys.exit(main())
