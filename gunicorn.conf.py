"""gunicorn settings, from the environment (README, "Settings"): `gunicorn -c gunicorn.conf.py shop.wsgi`.

gthread workers with a few threads each: keep-alive connections (sync workers close every one), and
a thread can wait on DynamoDB while another renders. The worker count follows the cores, capped for
small machines. bench/notes/performance.md has the measured rows behind these defaults.
"""
import multiprocessing
import os

# Only the proxy in front (nginx on the same host) reaches gunicorn: it trusts the X-Forwarded-For and
# X-Forwarded-Proto nginx sends, and a client reaching gunicorn directly could forge them and tie up its
# threads with slow requests. A unix socket works too (GUNICORN_BIND=unix:/run/shop/gunicorn.sock);
# the image listens on its container's network (Dockerfile).
bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", min(2 * multiprocessing.cpu_count() + 1, 8)))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")
# Connections waiting to be accepted; a burst beyond it is refused (wrk counts connect errors).
backlog = int(os.environ.get("GUNICORN_BACKLOG", "2048"))
# A request that takes longer than this is killed (its worker restarted): pages take milliseconds.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))
# Recycle workers now and then, so a slow leak can never grow without bound. A gthread worker
# finishes its requests before it exits: no connection is dropped (measured in bench/notes/performance.md).
# A new worker starts cold (imports, empty per-process caches, templates to compile): at 20,000 a
# 2-core box serving 5,000 pages/s recycled each worker every 20 s, and hot p99 went from 15-37 ms to
# 82-383 ms (bench/notes/performance.md, "The hot tail, explained and ended").
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "100000"))
max_requests_jitter = max_requests // 10
# Proxies whose X-Forwarded-* headers gunicorn trusts (comma-separated addresses, or *).
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")

# Off by default: the app logs one line per request already (shop.middleware.RequestLogMiddleware,
# with the request id), and nginx in front logs its own; "-" writes gunicorn's to stderr as well.
accesslog = os.environ.get("GUNICORN_ACCESS_LOG", "") or None
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
# gunicorn's lines in the app's format (LOG_FORMAT: JSON objects or key=value), on stderr.
logger_class = "shop.gunicorn_logging.Logger"

# The heartbeat file lives in memory where there is /dev/shm (containers), not on a slow disk.
if os.path.isdir("/dev/shm"):
    worker_tmp_dir = "/dev/shm"


def post_worker_init(worker):
    """One line per worker boot with the CPU the import cost (bench/load.py reads it)."""
    times = os.times()
    worker.log.info("worker booted in %.3f s of CPU", times.user + times.system)


# Prometheus metrics from every worker (metrics/): each writes its values to files in one folder,
# which /metrics adds up. A folder of this server's own, emptied at start, unless one is given.
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    import tempfile

    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="shop-metrics-")


def on_starting(server):
    folder = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        if name.endswith(".db"):
            os.unlink(os.path.join(folder, name))


def child_exit(server, worker):
    """A worker's live gauges leave with it (prometheus_client's multiprocess mode)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
