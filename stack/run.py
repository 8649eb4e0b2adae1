"""`make run`: DynamoDB Local on disk, migrations, table, demo data, index, then the web server and
sync_index side by side until Ctrl-C stops them all."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.core.management.base import CommandError

from stack.dynamodb_local import ROOT, DynamoDBLocal, DynamoDBLocalError, is_up

VAR = Path(os.environ.get("SHOP_VAR_DIR", ROOT / "var")).resolve()  # as shop/settings.py reads it
DYNAMODB_PORT = int(os.environ.get("DYNAMODB_LOCAL_PORT", "8001"))
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
    from pagination_index import get_index

    index = get_index()
    if hasattr(index, "create_table"):  # PAGINATION_INDEX_BACKEND=dynamodb: the index's own table
        print(f"index table {index.table} (PAGINATION_INDEX_BACKEND=dynamodb)")
        index.create_table()
    call_command("seed_demo", if_empty=True)
    call_command("sync_index", once=True, verbosity=0)
    call_command("rebuild_index", if_empty=True)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops everything as cleanly as Ctrl-C
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
    try:
        prepare(env)
        print(f"serving http://{WEB_ADDRESS}/ (Ctrl-C stops the site, sync_index and DynamoDB Local)")
        children.append(subprocess.Popen([sys.executable, "manage.py", "runserver", WEB_ADDRESS], cwd=ROOT, env=env))
        children.append(subprocess.Popen([sys.executable, "manage.py", "sync_index"], cwd=ROOT, env=env))
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
        return 1  # a child died on its own
    except KeyboardInterrupt:
        return 0
    except (CommandError, DynamoDBLocalError) as exc:
        print(f"make run: {exc}", file=sys.stderr)
        return 1
    finally:
        # Clean-up must finish even if the user signals again: ignore further signals meanwhile.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()
        if database:
            database.stop()


if __name__ == "__main__":
    sys.exit(main())
