"""StrictEndpoint: the endpoint as a child process (started by tests, benchmarks and `make run`), and a
small client of its admin API."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from stack.dynamodb_local import ROOT

DEFAULT_PRINCIPAL = "default"


class StrictEndpointError(RuntimeError):
    pass


def new_static_credentials() -> tuple[str, str]:
    from stack.strict_endpoint.auth import new_key_id, new_secret

    return new_key_id("AKIA"), new_secret()


class StrictEndpoint:
    """`python -m stack.strict_endpoint` in front of `upstream` (DynamoDB Local's URL).

    It knows one pair of long-term credentials from the start (`access_key_id`, `secret_access_key`,
    principal "default"); `config` holds any other start-up settings (docs/testing.md)."""

    def __init__(self, upstream: str, *, config: dict | None = None, port: int = 0, admin_port: int = 0,
                 state_dir: Path | None = None, log_path: Path | None = None):
        self.upstream = upstream
        self.access_key_id, self.secret_access_key = new_static_credentials()
        self.config = dict(config or {})
        self.config.setdefault("credentials", []).append(
            {"access_key_id": self.access_key_id, "secret_access_key": self.secret_access_key,
             "principal": DEFAULT_PRINCIPAL})
        self.requested_ports = port, admin_port
        self._own_state_dir = state_dir is None
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="strict-endpoint-"))
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.port = self.admin_port = None
        self.ca_bundle: str | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def region(self) -> str:
        return self.config.get("region", "us-east-1")

    def env(self) -> dict[str, str]:
        """Environment for a process that should reach DynamoDB through the endpoint with the default
        credentials: real-shaped keys, the CA bundle, the endpoint URL (the site's DYNAMODB_ENDPOINT_URL)."""
        return {"AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
                "AWS_CA_BUNDLE": self.ca_bundle, "AWS_DEFAULT_REGION": self.region,
                "DYNAMODB_ENDPOINT_URL": self.url}

    def start(self, timeout: float = 30) -> "StrictEndpoint":
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ports_file = self.state_dir / "ports.json"
        ports_file.unlink(missing_ok=True)
        config_file = self.state_dir / "config.json"
        config_file.write_text(json.dumps(self.config))
        config_file.chmod(0o600)  # it holds secret keys
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        port, admin_port = self.requested_ports
        self.process = subprocess.Popen(
            [sys.executable, "-m", "stack.strict_endpoint", "--upstream", self.upstream, "--port", str(port),
             "--admin-port", str(admin_port), "--state-dir", str(self.state_dir), "--config", str(config_file)],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise StrictEndpointError(f"the strict endpoint exited with code {self.process.returncode}"
                                          + (f"; see {self.log_path}" if self.log_path else ""))
            if ports_file.exists():
                ports = json.loads(ports_file.read_text())
                self.port, self.admin_port, self.ca_bundle = ports["port"], ports["admin_port"], ports["ca_bundle"]
                return self
            time.sleep(0.05)
        self.stop()
        raise StrictEndpointError(f"the strict endpoint did not start within {timeout:.0f}s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._own_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> "StrictEndpoint":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- the admin API -------------------------------------------------------------------------
    def admin(self, method: str, path: str, body: dict | list | None = None):
        """One admin call; its JSON answer. An error answer raises StrictEndpointError with its text."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.admin_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise StrictEndpointError(f"{method} {path}: {exc.code} {exc.read().decode(errors='replace')}") from None

    def reset(self) -> None:
        """Back to the start-up settings; request log and meter emptied."""
        self.admin("POST", "/reset")

    def configure(self, **settings) -> dict:
        """Change settings while running (PATCH /config), e.g. clock_skew_seconds=400."""
        return self.admin("PATCH", "/config", settings)

    def add_credentials(self, principal: str = DEFAULT_PRINCIPAL) -> tuple[str, str]:
        """New long-term credentials (AKIA...) for `principal`: (access key id, secret)."""
        answer = self.admin("POST", "/credentials", {"principal": principal})
        return answer["access_key_id"], answer["secret_access_key"]

    def temporary_credentials(self, name: str, *, lifetime: float, rotate_every: float | None = None,
                              principal: str | None = None) -> str:
        """Serve temporary credentials under `name`; the URL for AWS_CONTAINER_CREDENTIALS_FULL_URI."""
        body = {"lifetime": lifetime, "principal": principal or name}
        if rotate_every is not None:
            body["rotate_every"] = rotate_every
        return self.admin("PUT", f"/temporary-credentials/{name}", body)["url"]

    def set_faults(self, rules: list[dict], *, seed: int = 0, latency: dict | None = None) -> None:
        """Faults from now on (stack/strict_endpoint/faults.py); `set_faults([])` removes them."""
        self.admin("PUT", "/faults", {"seed": seed, "rules": rules, "latency": latency or {}})

    def set_policies(self, principal: str, policies: list[dict]) -> None:
        """`principal`'s IAM identity policies from now on (a principal with none may do anything)."""
        self.admin("PUT", f"/principals/{principal}", {"policies": policies})

    def configure_hook(self, name: str, **options) -> dict:
        """Change the options of the `streams` or `gsi_view` hook while it runs (PATCH /hooks/<name>)."""
        return self.admin("PATCH", f"/hooks/{name}", options)

    def hook_status(self, name: str) -> dict:
        return self.admin("GET", f"/hooks/{name}")

    def meter(self) -> dict:
        """Read and write units: total, by_operation, by_resource (table or table/index/name), by_key_id,
        by_request_id (X-Request-Tag)."""
        return self.admin("GET", "/meter")

    def reset_meter(self) -> None:
        self.admin("DELETE", "/meter")

    def requests(self, since: int = 0) -> list[dict]:
        return self.admin("GET", f"/requests?since={since}")

    def attempts_summary(self) -> dict:
        return self.admin("GET", "/requests/summary")

    def clear_requests(self) -> None:
        self.admin("DELETE", "/requests")
