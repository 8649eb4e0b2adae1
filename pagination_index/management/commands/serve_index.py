from django.core.management.base import BaseCommand, CommandError

from pagination_index.conf import index_settings
from pagination_index.resp.server import Settings, run


class Command(BaseCommand):
    help = (
        "Serve a files index (PAGINATION_INDEX['SERVE']['OPTIONS']) over the Redis protocol, RESP2 and RESP3, to "
        "the site's hosts and sync_index (the resp backend, pagination_index.backends.resp.RespIndex) and to any "
        "Redis client: ZCARD, ZRANGE, ZREVRANGE, ZSCORE, ZADD, ZREM, ZCOMMIT and more (docs/backends-resp.md). "
        "This process owns the files: run one per index, and no sync_index or commit_index on the files "
        "backend beside it. Stops cleanly on SIGTERM or Ctrl-C."
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
        parser.add_argument("--appendfsync", choices=["always", "everysec"], default=server["APPENDFSYNC"],
                            help="Sync each write batch's log before its replies (always), or once a second "
                                 "(everysec) (PAGINATION_INDEX['SERVE']['APPENDFSYNC'], default %(default)s).")

    def handle(self, *args, bind, port, path, appendfsync, verbosity, **options):
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
