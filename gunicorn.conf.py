"""gunicorn settings, from the environment (README, "Settings"): `gunicorn -c gunicorn.conf.py shop.wsgi`.

Page requests mostly wait on DynamoDB and the index, so each worker runs a few threads; the worker
count follows the cores, capped for small machines.
"""
import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", min(2 * multiprocessing.cpu_count() + 1, 8)))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
worker_class = "gthread"
# A request that takes longer than this is killed (its worker restarted): pages take milliseconds.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))
# Recycle workers now and then, so a slow leak can never grow without bound.
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "2000"))
max_requests_jitter = max_requests // 10
# Proxies whose X-Forwarded-* headers gunicorn trusts (comma-separated addresses, or *).
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")

accesslog = os.environ.get("GUNICORN_ACCESS_LOG", "-") or None  # "-" is stdout; empty turns it off
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms "%(a)s" request_id=%({x-request-id}o)s'

# The heartbeat file lives in memory where there is /dev/shm (containers), not on a slow disk.
if os.path.isdir("/dev/shm"):
    worker_tmp_dir = "/dev/shm"
