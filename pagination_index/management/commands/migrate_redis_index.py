import redis
from django.core.management.base import CommandError

from pagination_index import get_index
from pagination_index.backends.redis import FAILURES, RedisIndex, glob_escape
from pagination_index.management import ReportingCommand, reports_unavailable
from pagination_index.sortkeys import micros_sort_key

READ_CHUNK = 10_000


class Command(ReportingCommand):
    help = (
        "Copy a Redis index kept in the old single-node layout (<prefix>g:<group> sorted sets and the "
        "<prefix>groups registry) into the configured Redis index's layout (<prefix>{<product>}...), on "
        "the same Redis or into a Redis Cluster. Each group is swapped in whole. Stop sync_index first; "
        "start the new release's sync_index afterwards, which resumes from its checkpoints."
    )

    def add_arguments(self, parser):
        parser.add_argument("--from", dest="source", metavar="URL",
                            help="The old index's Redis (redis://HOST:PORT/DB). Default: the index's own "
                                 "PAGINATION_INDEX_REDIS_URL (not a cluster URL).")
        parser.add_argument("--from-prefix", metavar="PREFIX",
                            help="The old index's key prefix. Default: the index's KEY_PREFIX.")
        parser.add_argument("--delete-old", action="store_true",
                            help="Delete each old key once its group is copied, and the old registry at the end.")
        parser.add_argument("--dry-run", action="store_true", help="Count the old groups and entries; write nothing.")

    @reports_unavailable
    def handle(self, *args, source, from_prefix, delete_old, dry_run, **options):
        index = get_index()
        if not isinstance(index, RedisIndex):
            raise CommandError("PAGINATION_INDEX is not the Redis backend (PAGINATION_INDEX_BACKEND=redis).")
        if source is None and index.cluster:
            raise CommandError("The index is a Redis Cluster: name the old single Redis with --from URL.")
        prefix = from_prefix or index.prefix
        old = redis.Redis.from_url(source or index.options["LOCATION"], socket_connect_timeout=2)
        try:
            keys = sorted(key.decode() for key in old.scan_iter(match=glob_escape(prefix) + "g:*", count=1000))
            sizes = {key: old.zcard(key) for key in keys}
            if dry_run:
                self.stdout.write(f"would copy {len(keys)} groups ({sum(sizes.values()):,} entries); nothing written")
                return
            progress = self.progress(len(keys), "copying groups")
            for key in keys:
                group = key[len(prefix) + 2 :]
                entries = []
                for start in range(0, sizes[key], READ_CHUNK):
                    found = old.zrange(key, start, start + READ_CHUNK - 1, withscores=True)
                    entries += [(member.decode(), micros_sort_key(score)) for member, score in found]
                index.replace(group, entries)
                if delete_old:
                    old.unlink(key)
                if progress:
                    progress.advance()
            if progress:
                progress.finish()
            if delete_old:
                old.unlink(f"{prefix}groups")
        except FAILURES as exc:
            raise CommandError(f"The old index's Redis failed: {exc}") from exc
        finally:
            old.close()
        self.summary(f"copied {len(keys)} groups ({sum(sizes.values()):,} entries)"
                     + ("; old keys deleted" if delete_old else "; old keys kept (--delete-old removes them)"))
