"""docker-compose.yml and the Dockerfile, checked without a Docker engine: the Compose file is
validated by `docker-compose config`, and everything the files run or copy must exist here."""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.management import get_commands, load_command_class

from tests.conftest import service_missing

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"


# What `make compose-env` writes to .env: compose refuses to start without each of them.
SECRETS = {name: f"{name.lower()}-test-only-0123456789abcdef" for name in (
    "DJANGO_SECRET_KEY", "COMMENTS_CURSOR_KEY", "MODERATION_REPORTER_KEY", "POSTGRES_PASSWORD", "REDIS_PASSWORD")}


def compose_config(env: dict, tmp: Path) -> subprocess.CompletedProcess:
    if not shutil.which("docker-compose"):
        service_missing("docker-compose is not installed (Debian: apt-get install docker-compose)")
    # An empty env file: a developer's .env (make compose-env) must not fill the variables, only `env`.
    (tmp / "empty.env").write_text("")
    return subprocess.run(["docker-compose", "--file", str(COMPOSE), "--project-directory", str(ROOT),
                           "--env-file", str(tmp / "empty.env"), "config"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", **env})


@pytest.fixture(scope="module")
def compose(tmp_path_factory):
    """The Compose file as `docker-compose config` resolves it (anchors, merges, variables)."""
    result = compose_config(SECRETS, tmp_path_factory.mktemp("compose"))
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_compose_has_no_default_secret_and_refuses_to_start_without_one(missing, tmp_path):
    """L7: no known secret key or database password to fall back to, and Redis asks for a password
    (django-redis unpickles what it reads: write access to Redis would be code execution)."""
    result = compose_config({name: value for name, value in SECRETS.items() if name != missing}, tmp_path)
    assert result.returncode != 0 and missing in result.stderr


def shell_words(command) -> list[str]:
    return command if isinstance(command, list) else shlex.split(command)


def manage_calls(command) -> list[list[str]]:
    """Every `python manage.py NAME ARGS...` in a service command, `sh -c` scripts included."""
    words = shell_words(command)
    if words[:2] == ["sh", "-c"]:
        calls = []
        for part in re.split(r"&&|;|\bthen\b|\bfi\b", words[2]):
            found = re.search(r"python manage\.py (.+)", part)
            if found:
                calls.append(shlex.split(found.group(1)))
        return calls
    if words[:2] == ["python", "manage.py"]:
        return [words[2:]]
    return []


def test_services_and_start_up_order(compose):
    services = compose["services"]
    assert set(services) == {"dynamodb", "redis", "postgres", "index", "init", "web", "sync", "nginx"}
    for name in ("dynamodb", "redis", "postgres", "index", "web", "nginx"):
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    assert {dep: cond["condition"] for dep, cond in services["init"]["depends_on"].items()} == {
        "dynamodb": "service_healthy", "redis": "service_healthy", "postgres": "service_healthy",
        "index": "service_healthy"}
    for name in ("web", "sync"):
        assert services[name]["depends_on"] == {"init": {"condition": "service_completed_successfully"}}
    assert services["nginx"]["depends_on"] == {"web": {"condition": "service_healthy"}}


def test_nginx_fronts_web_with_the_repositorys_config(compose):
    """nginx is the published port; its site is the repository's template, pointed at web, serving the
    static files init collects into the volume they share."""
    nginx, web, init = (compose["services"][name] for name in ("nginx", "web", "init"))
    assert nginx["image"].startswith("nginx:")
    published = nginx["ports"][0]  # "host_ip:port:target/tcp" (docker-compose 1.x) or its long form
    if isinstance(published, dict):
        published = f"{published['host_ip']}:{published['published']}:{published['target']}/tcp"
    assert published == "127.0.0.1:8000:80/tcp"  # the host's loopback unless WEB_BIND says otherwise
    assert "ports" not in web  # gunicorn only through nginx: nobody else can send it X-Forwarded-For
    volumes = {target: source for source, target, *_ in (v.split(":") for v in nginx["volumes"])}
    text = Path(volumes["/etc/nginx/templates/default.conf.template"]).read_text()
    placeholders = set(re.findall(r"\$\{(\w+)\}", text))
    assert placeholders == {"SHOP_UPSTREAM", "NGINX_PORT", "SHOP_STATIC_ROOT", "NGINX_CACHE_DIR",
                            "NGINX_TRUSTED_PROXIES", "NGINX_LIMIT_EXEMPT"}
    assert placeholders <= set(nginx["environment"])  # the image's envsubst fills only what is set
    assert nginx["environment"]["SHOP_UPSTREAM"] == "web:8000"
    assert volumes[nginx["environment"]["SHOP_STATIC_ROOT"]] == "static-files"
    assert f"static-files:{init['environment']['DJANGO_STATIC_ROOT']}:rw" in init["volumes"]


def test_data_lives_on_volumes(compose):
    services = compose["services"]
    dynamodb = services["dynamodb"]
    assert dynamodb["image"].startswith("amazon/dynamodb-local")
    assert dynamodb["command"][-3:] == ["-sharedDb", "-dbPath", "/home/dynamodblocal/data"]
    assert any(v.startswith("dynamodb-data:/home/dynamodblocal/data") for v in dynamodb["volumes"])
    assert any(v.startswith("postgres-data:/var/lib/postgresql/data") for v in services["postgres"]["volumes"])
    assert set(compose["volumes"]) >= {"dynamodb-data", "postgres-data"}


def test_the_resp_index_server_is_a_service_of_its_own(compose):
    """serve_index owns the files on a volume of its own; the app services reach it by name."""
    index = compose["services"]["index"]
    assert manage_calls(index["command"]) == [["serve_index", "--bind", "0.0.0.0", "--port", "6380"]]
    assert index["environment"]["PAGINATION_INDEX_PATH"] == "/srv/index"
    assert any(volume.startswith("index-data:/srv/index") for volume in index["volumes"])
    for name in ("init", "web", "sync"):
        assert compose["services"][name]["environment"]["PAGINATION_INDEX_RESP_URL"] == "redis://index:6380/0"


def test_app_services_use_redis_index_and_postgres(compose):
    for name in ("init", "web", "sync"):
        env = compose["services"][name]["environment"]
        assert env["PAGINATION_INDEX_BACKEND"] == "redis" and env["CACHE_BACKEND"] == "redis"
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["DYNAMODB_ENDPOINT_URL"] == "http://dynamodb:8000"
        assert env["DJANGO_SECRET_KEY"] == SECRETS["DJANGO_SECRET_KEY"] and "DJANGO_DEBUG" not in env
        assert env["REDIS_URL"] == f"redis://:{SECRETS['REDIS_PASSWORD']}@redis:6379/0"
        assert env["DATABASE_URL"] == f"postgres://shop:{SECRETS['POSTGRES_PASSWORD']}@postgres:5432/shop"
        assert (env["COMMENTS_CLIENT_IP_HEADER"], env["COMMENTS_CLIENT_IP_PROXIES"]) == ("X-Forwarded-For", "1")
    redis = compose["services"]["redis"]
    assert "--requirepass" in redis["command"][-1] and redis["environment"]["REDIS_PASSWORD"] == SECRETS["REDIS_PASSWORD"]


def test_every_manage_command_exists_with_its_options(compose):
    commands = get_commands()
    calls = [call for service in compose["services"].values() if "command" in service
             for call in manage_calls(service["command"])]
    names = [call[0] for call in calls]
    assert sorted(names) == sorted(["serve_index", "collectstatic", "migrate", "create_tables", "seed_demo",
                                    "rebuild_index", "sync_index"])
    for name, *args in calls:
        assert name in commands, f"manage.py {name} does not exist"
        parser = load_command_class(commands[name], name).create_parser("manage.py", name)
        parser.parse_args(args)  # an unknown option exits (SystemExit) and fails the test


def test_web_runs_gunicorn_with_the_projects_config(compose):
    words = shell_words(compose["services"]["web"]["command"])
    assert words[0] == "gunicorn"
    config = words[words.index("--config") + 1]
    assert (ROOT / config).is_file()
    module = words[-1]
    assert (ROOT / (module.replace(".", "/") + ".py")).is_file()


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    return [tuple(line.split(None, 1)) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_dockerfile_slim_non_root_runtime_deps_only():
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    users = [arg for op, arg in instructions if op == "USER"]
    assert users and users[-1] not in {"root", "0"}
    copied = [arg.split()[:-1] for op, arg in instructions if op == "COPY"]
    sources = [source for group in copied for source in group if not source.startswith("--")]
    for source in sources:
        assert (ROOT / source).exists(), f"Dockerfile copies {source}, which does not exist"
    assert not {"requirements-dev.txt", "requirements-dev.lock", "tests"} & set(sources)
    # Every app in INSTALLED_APPS that lives in this project is copied into the image.
    from django.conf import settings
    local_apps = {app.split(".")[0] for app in settings.INSTALLED_APPS if (ROOT / app.split(".")[0]).is_dir()}
    assert local_apps <= set(sources)
    runs = " ".join(arg for op, arg in instructions if op == "RUN")
    assert "pip install --require-hashes -r requirements.lock" in runs and "collectstatic" in runs
    cmd = [arg for op, arg in instructions if op == "CMD"][-1]
    assert "gunicorn.conf.py" in cmd and (ROOT / "gunicorn.conf.py").is_file()


def test_the_images_files_are_enough_to_run(tmp_path):
    """Only what the Dockerfile copies, in a folder of its own: settings load, the checks pass,
    collectstatic runs, and gunicorn loads its config and the WSGI app."""
    for op, arg in dockerfile_instructions():
        if op != "COPY" or arg.startswith("requirements"):
            continue
        *sources, target = arg.split()
        for source in sources:
            destination = tmp_path / (target if target not in {"./", "."} else source).removeprefix("./")
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, destination, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(ROOT / source, destination)
    env = {"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "shop.settings",
           "DJANGO_SECRET_KEY": "image-test-only-0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f",
           "COMMENTS_CURSOR_KEY": "image-test-only-cursor-key-1d3f5b7d9f1b3d5f7b9d1f3b5d7f9b1d",
           "MODERATION_REPORTER_KEY": "image-test-only-reporter-key-8c6a4e2c0a8e6c4a2e0c8a6e4c2a0e8c",
           "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "DJANGO_STATIC_ROOT": str(tmp_path / "collected")}
    for command in (["manage.py", "check"], ["manage.py", "collectstatic", "--no-input", "-v", "0"],
                    ["-m", "gunicorn", "--check-config", "--config", "gunicorn.conf.py", "shop.wsgi"]):
        result = subprocess.run([sys.executable, *command], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, f"{command}: {result.stdout}{result.stderr}"
    assert list((tmp_path / "collected" / "css").glob("shop.*.css.gz"))  # hashed and compressed
