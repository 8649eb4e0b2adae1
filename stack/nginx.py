"""Run nginx with the repository's site config (deploy/nginx/shop.conf.template) as a child process
under a prefix folder of its own: tests and benchmarks put it in front of their own gunicorn."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from string import Template

from stack.dynamodb_local import ROOT, free_port
from stack.processes import process_tree, stop

SITE_TEMPLATE = ROOT / "deploy" / "nginx" / "shop.conf.template"
MIME_TYPES = Path("/etc/nginx/mime.types")


class NginxError(RuntimeError):
    pass


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((path for path in ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
                                          if os.access(path, os.X_OK)), None)


def site_config(*, upstream: str, port: int, static_root: Path, cache_dir: Path, trusted_proxies: str = "127.0.0.1",
                limit_exempt: str = "127.0.0.1") -> str:
    """The repository's site file with its ${...} placeholders filled (nginx's own $variables kept)."""
    return Template(SITE_TEMPLATE.read_text()).safe_substitute(
        SHOP_UPSTREAM=upstream, NGINX_PORT=str(port), SHOP_STATIC_ROOT=str(static_root),
        NGINX_CACHE_DIR=str(cache_dir), NGINX_TRUSTED_PROXIES=trusted_proxies, NGINX_LIMIT_EXEMPT=limit_exempt)


class Nginx:
    """nginx on `port` (a free one by default) in front of `upstream` (host:port). Clients it believes
    about X-Forwarded-For (a load balancer's role) and clients it never rate-limits: 127.0.0.1 unless
    told otherwise, as in docker-compose.yml; tests and benchmarks play other clients from 127.0.0.2 and
    up (the loopback range)."""

    def __init__(self, prefix: Path, *, upstream: str, static_root: Path, port: int | None = None,
                 workers: int = 1, trusted_proxies: str = "127.0.0.1", limit_exempt: str = "127.0.0.1"):
        self.prefix = Path(prefix)
        self.port = port or free_port()
        self.upstream = upstream
        self.static_root = Path(static_root)
        self.workers = workers
        self.trusted_proxies, self.limit_exempt = trusted_proxies, limit_exempt
        self.process: subprocess.Popen | None = None

    def write_config(self) -> Path:
        self.prefix.mkdir(parents=True, exist_ok=True)
        (self.prefix / "shop.conf").write_text(site_config(
            upstream=self.upstream, port=self.port, static_root=self.static_root, cache_dir=self.prefix / "cache",
            trusted_proxies=self.trusted_proxies, limit_exempt=self.limit_exempt))
        temp = "\n".join(f"  {kind}_temp_path {self.prefix / ('temp-' + kind)};"
                         for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        user = "user root root;\n" if os.geteuid() == 0 else ""  # else workers would run as nobody
        conf = self.prefix / "nginx.conf"
        conf.write_text(f"""{user}worker_processes {self.workers};
daemon off;
pid {self.prefix / 'nginx.pid'};
error_log {self.prefix / 'error.log'} warn;
events {{ worker_connections 4096; }}
http {{
  include {MIME_TYPES};
  default_type application/octet-stream;
  access_log off;
  sendfile on;
  keepalive_requests 100000;
{temp}
  include {self.prefix / 'shop.conf'};
}}
""")
        return conf

    def start(self, timeout: float = 15) -> "Nginx":
        binary = nginx_binary()
        if binary is None:
            raise NginxError("nginx is not installed (Debian: apt-get install nginx)")
        conf = self.write_config()
        check = subprocess.run([binary, "-t", "-p", str(self.prefix), "-c", str(conf)], capture_output=True, text=True)
        if check.returncode:
            raise NginxError(f"nginx -t failed: {check.stderr}")
        self.process = subprocess.Popen([binary, "-p", str(self.prefix), "-c", str(conf)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NginxError(f"nginx exited with {self.process.returncode}; see {self.prefix / 'error.log'}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/static/", timeout=1)
                return self
            except urllib.error.HTTPError:
                return self  # any answer: listening
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise NginxError(f"nginx did not listen on {self.port} within {timeout} s")

    def stop(self) -> None:
        stop(self.process, 10)

    def pids(self) -> list[int]:
        """The master and its workers (for CPU accounting)."""
        return process_tree(self.process.pid)

    def __enter__(self) -> "Nginx":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
