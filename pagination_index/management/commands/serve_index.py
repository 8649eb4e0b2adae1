import fcntl
import os
import time

from django.core.management.base import BaseCommand, CommandError

from pagination_index.conf import index_settings
from pagination_index.resp.server import Settings, run


class Command(BaseCommand):
    help = (
        "Serve a files index (PAGINATION_INDEX['SERVE']['OPTIONS']) over the Redis protocol, RESP2 and RESP3, to "
        "the site's hosts and sync_index (the resp backend, pagination_index.backends.resp.RespIndex) and to any "
        "Redis client: ZCARD, ZRANGE, ZREVRANGE, ZSCORE, ZADD, ZREM, ZCOMMIT and more (docs/backends-resp.md). "
        "This process owns the files: run one per index, and no sync_index or commit_index on the files "
        "backend beside it; a second serve_index of the same folder waits for the first to stop (--lock-wait). "
        "Stops cleanly on SIGTERM or Ctrl-C."
    )

    def add_arguments(self, parser):
        server = index_settings.SERVE
        parser.add_argument("--bind", default=server["BIND"],
                            help="Address to listen on (PAGINATION_INDEX['SERVE']['BIND'], default %(default)s).")
        parser.add_argument("--port", type=int, default=server["PORT"],
                            help="Port (PAGINATION_INDEX['SERVE']['PORT'], default %(default)s).")
        parser.add_argument("--path", default=server["OPTIONS"].get("PATH"),
                            help="The files index's folder (PAGINATION_INDEX['SERVE']['OPTIONS']['PATH'], "
                                 "default %(default)s).")
        parser.add_argument("--lock-wait", type=float, default=60.0,
                            help="Seconds to wait for another serve_index of the same folder to stop (a deployment "
                                 "that starts the new server before the old one has exited) before giving up "
                                 "(default %(default)s).")
        parser.add_argument("--appendfsync", choices=["always", "everysec"], default=server["APPENDFSYNC"],
                            help="Sync each write batch's log before its replies (always), or once a second "
                                 "(everysec) (PAGINATION_INDEX['SERVE']['APPENDFSYNC'], default %(default)s).")

    def handle(self, *args, bind, port, path, appendfsync, lock_wait, verbosity, **options):
        server = index_settings.SERVE
        files = {"COMMIT_ENTRIES": 1000, "COMMIT_SECONDS": 60.0, **server["OPTIONS"]}
        if not path:
            raise CommandError("No files index to serve: set PAGINATION_INDEX['SERVE']['OPTIONS']['PATH'], or --path.")
        try:
            config = Settings(
                path=path, host=bind, port=port, password=server["PASSWORD"],
                maxclients=server["MAXCLIENTS"], max_request_bytes=server["MAX_REQUEST_BYTES"],
                appendfsync=appendfsync, tls_cert_file=server["TLS_CERT_FILE"], tls_key_file=server["TLS_KEY_FILE"],
                commit_entries=files["COMMIT_ENTRIES"], commit_seconds=files["COMMIT_SECONDS"],
                index_options={key: value for key, value in files.items()
                               if key not in ("PATH", "COMMIT_ENTRIES", "COMMIT_SECONDS")},
            )
        except ValueError as exc:
            raise CommandError(str(exc))

        owner = self.own(path, lock_wait)  # noqa: F841 - held, with its lock, for the process's life

        def ready(listener):
            if verbosity >= 1:
                addresses = ", ".join(f"{sock.getsockname()[0]}:{sock.getsockname()[1]}" for sock in listener.sockets)
                tls = " (TLS)" if config.tls_cert_file else ""
                self.stdout.write(f"serve_index: the files index in {path} on {addresses}{tls}, "
                                  f"appendfsync {config.appendfsync}; Ctrl-C or SIGTERM stops it")
                self.stdout.flush()

        try:
            run(config, ready)
        except OSError as exc:
            raise CommandError(f"serve_index: {exc}")
        if verbosity >= 1:
            self.stdout.write("serve_index: stopped; staged changes are in the logs, committed on the next start")

    def own(self, path: str, wait: float) -> int:
        """flock(2) on PATH/serve_index.lock for as long as this process lives (the kernel lets it go
        when the process ends, killed or not): the server keeps each group's view in memory, so a second
        server writing the same files would serve stale pages. ECS may start a service's new task
        before the old one has stopped; the new one waits. On EFS (NFS) flock is a POSIX lock, which
        holds across hosts."""
        os.makedirs(path, exist_ok=True)
        fd = os.open(os.path.join(path, "serve_index.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        deadline, said = time.monotonic() + wait, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise CommandError(f"serve_index: another serve_index serves {path} (it holds serve_index.lock); "
                                       "stop it, or give --lock-wait more seconds.")
                if not said:
                    self.stdout.write(f"serve_index: waiting up to {wait:g} s for the other serve_index of {path} "
                                      "to stop")
                    self.stdout.flush()
                    said = True
                time.sleep(0.2)
