import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from pagination_index import get_index, source
from pagination_index.stream import StreamConsumer, StreamTrimmed


class Command(BaseCommand):
    help = (
        "Keep the pagination index in step with the comments table by consuming its DynamoDB Stream. "
        "Follows the stream until SIGTERM/SIGINT (finishing the current batch), or drains it with --once."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="Drain the stream to its current end, then exit.")
        parser.add_argument(
            "--poll-seconds", type=float, default=settings.SYNC_INDEX_POLL_SECONDS,
            help="Seconds to wait between polls when caught up (default: %(default)s, SYNC_INDEX_POLL_SECONDS).",
        )
        parser.add_argument("--batch-size", type=int, default=1000, help="Records per GetRecords call (max 1000).")

    def handle(self, *args, once, poll_seconds, batch_size, verbosity, **options):
        arn = source.stream_arn()
        if not arn:
            raise CommandError(f"Table {settings.DYNAMODB['TABLE']!r} has no stream; run `manage.py create_tables`.")
        stop = threading.Event()
        restore = self._install_signal_handlers(stop)
        consumer = StreamConsumer(index=get_index(), stream_arn=arn, batch_size=min(batch_size, 1000), stop_event=stop)

        def report(result):
            if result.records and verbosity >= 1:
                self.stdout.write(f"applied {result.records} records ({result.ops} index ops)")

        if verbosity >= 1 and not once:
            self.stdout.write(f"following {arn} (Ctrl-C to stop)")
        try:
            total = consumer.run(once=once, poll_seconds=poll_seconds, on_poll=report)
        except StreamTrimmed as exc:
            raise CommandError(f"STREAM RECORDS LOST: {exc}") from exc
        finally:
            restore()
        if verbosity >= 1:
            state = "stopped" if stop.is_set() else "caught up"
            self.stdout.write(self.style.SUCCESS(f"{state}: {total.records} records applied"))

    def _install_signal_handlers(self, stop: threading.Event):
        """SIGTERM/SIGINT set `stop`; returns a function that puts the previous handlers back."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def handler(signum, frame):
            if stop.is_set():
                raise KeyboardInterrupt  # a second signal forces the exit
            self.stderr.write("stopping after the current batch (signal again to force)")
            stop.set()

        previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGTERM, signal.SIGINT)}
        return lambda: [signal.signal(signum, old) for signum, old in previous.items()]
