import signal
import threading

from django.core.management.base import CommandError
from django.db import DatabaseError, connections
from django.db.models.functions import Now
from django.utils import timezone

from pagination_index import get_index, signals, sources
from pagination_index.conf import index_settings
from pagination_index.leases import lease_release
from pagination_index.management import ReportingCommand, reports_unavailable, stream_arn
from pagination_index.models import ShardCheckpoint
from pagination_index.stale import stale_groups
from pagination_index.stream import PollResult, StreamConsumer, checkpoint_database


class Command(ReportingCommand):
    help = (
        "Keep the pagination index in step with the tables of PAGINATION_INDEX['SOURCES'] by consuming their "
        "DynamoDB Streams (one consumer per table). Follows the streams until SIGTERM/SIGINT (finishing the "
        "current batch), or drains them with --once. Shards are leased, so a second sync_index can run as a "
        "standby; --status shows the state."
    )

    def add_arguments(self, parser):
        sync = index_settings.SYNC
        parser.add_argument("--once", action="store_true", help="Drain the streams to their current end, then exit.")
        parser.add_argument("--status", action="store_true",
                            help="Print each shard's checkpoint, lease and lag, and any groups needing a rebuild.")
        parser.add_argument(
            "--poll-seconds", type=float, default=sync["POLL_SECONDS"],
            help="How often a shard at its end is read again, within a poll and between polls "
                 "(default: %(default)s, PAGINATION_INDEX['SYNC']['POLL_SECONDS']).",
        )
        parser.add_argument(
            "--workers", type=int, default=sync["WORKERS"],
            help="Threads reading shards in parallel, per table (default: %(default)s, "
                 "PAGINATION_INDEX['SYNC']['WORKERS']); records are applied by one thread, in order per shard.",
        )
        parser.add_argument("--batch-size", type=int, default=sync["BATCH_SIZE"],
                            help="Records per GetRecords call (max 1000; default: %(default)s).")
        parser.add_argument(
            "--lease-seconds", type=float, default=sync["LEASE_SECONDS"],
            help="How long a shard lease lasts unless renewed; a standby takes over a dead consumer's shards "
                 "after this (default: %(default)s, PAGINATION_INDEX['SYNC']['LEASE_SECONDS']).",
        )

    @reports_unavailable
    def handle(self, *args, once, status, poll_seconds, batch_size, lease_seconds, workers, **options):
        tables = sources.by_table()
        if not tables:
            raise CommandError("PAGINATION_INDEX['SOURCES'] declares no source: there is no stream to follow.")
        arns = {table: stream_arn(declared[0]) for table, declared in tables.items()}
        if status:
            for arn in arns.values():
                self._status(arn, checkpoint_database(get_index()))
            return
        if lease_seconds <= 0:
            raise CommandError("--lease-seconds must be positive")
        if workers < 1:
            raise CommandError("--workers must be at least 1")
        stop, stopped = threading.Event(), threading.Event()
        restore = self._install_signal_handlers(stop, stopped)
        consumers = [StreamConsumer(index=get_index(), stream_arn=arns[table], sources=declared,
                                    batch_size=min(batch_size, 1000), stop_event=stop, lease_seconds=lease_seconds,
                                    workers=workers)
                     for table, declared in tables.items()]
        for consumer in consumers:
            signals.consumer_started.send(StreamConsumer, consumer=consumer)

        def report(result):
            for loss in result.trimmed:
                self.stderr.write(self.style.ERROR(f"STREAM RECORDS LOST: {loss}"))
            if result.records:
                self.note(f"applied {result.records} records ({result.ops} index ops)")

        if not once:
            for consumer in consumers:
                self.note(f"following {consumer.stream_arn} as {consumer.owner} (Ctrl-C to stop)")
        try:
            try:
                total = run_consumers(consumers, once=once, poll_seconds=poll_seconds, on_poll=report)
            except KeyboardInterrupt:  # a second signal: stop now, the batch under way rolled back
                stopped.set()  # from here on signals are ignored: nothing is left to interrupt but this
                try:
                    released = sum(lease_release(stream_arn=consumer.stream_arn, owner=consumer.owner,
                                                 using=consumer.database) for consumer in consumers)
                    leases = f"{released} shard lease(s) released"
                except DatabaseError:
                    leases = f"the shard leases could not be released and expire within {lease_seconds:g} s"
                raise CommandError(f"forced to stop: the batch under way was not applied; {leases}") from None
            stopped.set()
            if total.leased_elsewhere:
                self.warn(f"{len(total.leased_elsewhere)} shard(s) leased by another consumer were left to it "
                          "(see --status)")
            self.summary(f"{'stopped' if stop.is_set() else 'caught up'}: {total.records} records applied")
        finally:
            restore()  # may pass the signal on to the caller's own handler (stack.run): report first
        if total.trimmed:
            raise CommandError(
                f"{len(total.trimmed)} stream loss(es) recorded; verify_index fails until `rebuild_index` has run"
            )

    def _status(self, arn, database):
        rows = ShardCheckpoint.objects.using(database).filter(stream_arn=arn).order_by("shard_id")
        # Leases are judged by the database's clock (leases.py): so is what this shows.
        now = rows.annotate(database_now=Now()).values_list("database_now", flat=True).first() or timezone.now()
        self.stdout.write(f"stream {arn}")
        header = ("shard", "checkpoint", "finished", "lease owner", "lease expires", "last record", "lag")
        lines = [header]
        for row in rows:
            if row.lease_owner and row.lease_expires_at and row.lease_expires_at > now:
                expires = f"in {(row.lease_expires_at - now).total_seconds():.0f}s"
            else:
                expires = "expired" if row.lease_owner else "-"
            lines.append((
                row.shard_id,
                row.sequence_number or "TRIM_HORIZON",
                "yes" if row.finished else "no",
                row.lease_owner or "-",
                expires,
                row.last_record_at.isoformat(timespec="seconds") if row.last_record_at else "-",
                f"{row.lag_seconds:.1f}s" if row.lag_seconds is not None else "-",
            ))
        widths = [max(len(str(line[col])) for line in lines) for col in range(len(header))]
        for line in lines:
            self.stdout.write("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip())
        if not rows:
            self.stdout.write("no checkpoints yet: sync_index has not run on this stream")
        for group, reason in stale_groups(using=database).items():
            self.stdout.write(self.style.ERROR(f"needs rebuild: {group}: {reason}"))

    def _install_signal_handlers(self, stop: threading.Event, stopped: threading.Event):
        """SIGTERM/SIGINT set `stop`; a second one forces the exit unless the consumer has `stopped`
        already (then there is nothing left to interrupt but the exit itself, so it is ignored).
        Returns a function that puts the previous handlers back and, when a signal stopped us and the
        caller had a handler of its own for it (stack.run calling `sync_index --once` on start-up),
        raises the signal again for that handler: the caller was asked to stop too."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        received = []

        def handler(signum, frame):
            if stopped.is_set():
                return
            if stop.is_set():
                raise KeyboardInterrupt  # a second signal forces the exit
            self.note("stopping after the current batch (signal again to force)")
            received.append(signum)
            stop.set()

        previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGTERM, signal.SIGINT)}

        def restore():
            for signum, old in previous.items():
                signal.signal(signum, old)
            caller = previous[received[0]] if received else None
            if callable(caller) and caller is not signal.default_int_handler:
                signal.raise_signal(received[0])

        return restore


def run_consumers(consumers: list[StreamConsumer], *, once: bool, poll_seconds: float, on_poll) -> PollResult:
    """Run each table's consumer: the one of a single table on this thread (the usual case), several
    on threads of their own, their totals added up. The first failure is raised once all stopped."""
    if len(consumers) == 1:
        return consumers[0].run(once=once, poll_seconds=poll_seconds, on_poll=on_poll)
    results: list[PollResult] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(consumer: StreamConsumer) -> None:
        try:
            result = consumer.run(once=once, poll_seconds=poll_seconds, on_poll=on_poll)
            with lock:
                results.append(result)
        except BaseException as exc:  # handed to the main thread below
            errors.append(exc)
            consumer.stop_event.set()
        finally:
            connections.close_all()  # this thread's own

    threads = [threading.Thread(target=run, args=(consumer,), name=f"sync-{n}", daemon=True)
               for n, consumer in enumerate(consumers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)  # a short join keeps Ctrl-C deliverable to the main thread
    if errors:
        raise errors[0]
    total = PollResult()
    for result in results:
        total.records += result.records
        total.ops += result.ops
        total.finished_shards += result.finished_shards
        total.trimmed += result.trimmed
        total.leased_elsewhere |= result.leased_elsewhere
    return total
