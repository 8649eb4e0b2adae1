import json
from pathlib import Path

from botocore.exceptions import ClientError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from pagination_index import aws, get_index, sources
from pagination_index.management import ReportingCommand, reports_unavailable
from pagination_index.models import GivenUpRecord, StaleGroup
from pagination_index.sources import records_ops, table_of_stream
from pagination_index.stale import stale_groups_mark
from pagination_index.stream import checkpoint_database

MAX_PAGES = 100
RECEIVE_BATCH = 10  # ReceiveMessage's MaxNumberOfMessages: at most 10 a call
# Long enough that a message received early is not delivered again while the rebuild runs; if the
# command dies, the messages come back once it has passed and the next run handles them.
VISIBILITY_SECONDS = 900


class Command(ReportingCommand):
    help = (
        "Repair what the stream consumers gave up on. FOLDER and --queue: the Lambda event-source mapping's "
        "on-failure messages (DDBStreamBatchInfo: shard and sequence-number range), as files or in its SQS "
        "on-failure queue; those records are read again from the stream and the groups they touch marked as "
        "needing a rebuild (every group when they are no longer in the stream). --given-up: the dead-letter "
        "table, records sync_index or the Lambda handler could not apply. With --rebuild the groups are "
        "rebuilt (as rebuild_index does). A file moves to done/ once handled; a queue message is deleted "
        "once handled (and rebuilt, with --rebuild); a dead-letter row is marked repaired once rebuilt."
    )

    def add_arguments(self, parser):
        parser.add_argument("destination", type=Path, nargs="?",
                            help="A folder of on-failure messages (one JSON file each).")
        parser.add_argument("--queue", metavar="URL",
                            help="The SQS queue the mapping sends its on-failure messages to (its URL).")
        parser.add_argument("--max-messages", type=int, default=1000,
                            help="At most this many queue messages in one run (default 1000).")
        parser.add_argument("--wait-seconds", type=int, default=20,
                            help="ReceiveMessage's long poll (0-20 s; default 20): the run ends at the first "
                                 "empty answer.")
        parser.add_argument("--given-up", action="store_true",
                            help="The dead-letter table's records not yet repaired.")
        parser.add_argument("--rebuild", action="store_true", help="Rebuild the groups named (as rebuild_index does).")
        parser.add_argument("--dry-run", action="store_true", help="Only print what the messages name.")

    @reports_unavailable
    def handle(self, *args, destination, queue, given_up, rebuild, dry_run, **options):
        if destination is None and not queue and not given_up:
            raise CommandError("name what to repair: a FOLDER of on-failure messages, --queue URL or --given-up")
        if destination is not None and not destination.is_dir():
            raise CommandError(f"{destination} is not a folder of on-failure messages")
        database = checkpoint_database(get_index())
        groups: set[str] = set()
        everything = False
        files = sorted(destination.glob("*.json")) if destination is not None else []
        for path in files:
            try:
                info = json.loads(path.read_text())["DDBStreamBatchInfo"]
            except (ValueError, KeyError) as exc:
                raise CommandError(f"{path}: not an on-failure message of a DynamoDB stream ({exc})") from None
            named, lost = self._message_groups(path.name, info)
            groups |= named
            everything |= lost
        client, received = None, []
        if queue:
            client = aws.client("sqs", aws.BACKGROUND)
            received = self._receive(client, queue, options["max_messages"], options["wait_seconds"])
            for message in received:
                try:
                    info = json.loads(message["Body"])["DDBStreamBatchInfo"]
                except (ValueError, KeyError) as exc:
                    raise CommandError(f"message {message['MessageId']}: not an on-failure message of a "
                                       f"DynamoDB stream ({exc}); left in the queue") from None
                named, lost = self._message_groups(f"message {message['MessageId']}", info)
                groups |= named
                everything |= lost
        dead = list(GivenUpRecord.objects.using(database).filter(repaired_at__isnull=True).order_by("given_up_at")
                    ) if given_up else []
        for row in dead:  # the report --given-up asks for: on stdout
            self.stdout.write(f"given up by {row.via} at {row.given_up_at:%Y-%m-%d %H:%M:%S}: record "
                              f"{row.sequence_number} ({row.event_name}) of {row.shard_id or 'an unknown shard'}: "
                              f"{', '.join(row.groups) or 'no group'}; {row.error}")
            everything |= StaleGroup.ALL in row.groups
            groups |= set(row.groups) - {StaleGroup.ALL}
        handled = f"{len(files)} file(s), {len(received)} queue message(s), {len(dead)} given-up record(s)"
        if dry_run or not (files or received or dead):
            self.summary(f"{handled}; groups named: {', '.join(sorted(groups)) or 'none'}")
            return
        if (files or received) and (everything or groups):  # given-up records were marked when given up on
            reason = f"records the Lambda mapping gave up on ({len(files) + len(received)} on-failure message(s))"
            stale_groups_mark(groups=[StaleGroup.ALL] if everything else groups, reason=reason, using=database)
        if files:
            done = destination / "done"
            done.mkdir(exist_ok=True)
            for path in files:
                path.rename(done / path.name)
        if rebuild:
            self._rebuild(groups, everything)
            GivenUpRecord.objects.using(database).filter(pk__in=[row.pk for row in dead]).update(
                repaired_at=timezone.now())
        for message in received:  # only now: a message goes once what it named is marked (and rebuilt)
            client.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
        if dead and not rebuild and not (files or received):
            self.summary(f"{handled} not yet repaired; their groups ({', '.join(sorted(groups)) or '*'}) are marked "
                         f"for rebuild: fix what made them fail, then run this command with --rebuild")
            return
        self.summary(f"{handled} handled; "
                     + ("every group marked" if everything else f"marked: {', '.join(sorted(groups)) or 'none'}")
                     + ("; rebuilt" if rebuild else "; run `rebuild_index` (or this command with --rebuild)"))

    def _message_groups(self, name: str, info: dict) -> tuple[set[str], bool]:
        """The groups an on-failure message's records touch, read again from the stream; (set(), True)
        when they are gone from it (every group may be wrong)."""
        declared = sources.for_table(table_of_stream(info["streamArn"]))
        if not declared:
            raise CommandError(f"{name}: no source is declared on the table of {info['streamArn']}")
        try:
            named = {op.group for op in records_ops(declared, _batch_records(declared[0].stream_client(), info))}
        except ClientError as exc:
            self.warn(f"{name}: the records of {info['shardId']} from {info['startSequenceNumber']} are no "
                      f"longer in the stream ({exc.response['Error']['Code']}): every group may be wrong")
            return set(), True
        self.note(f"{name}: {info['batchSize']} records of {info['shardId']}: {', '.join(sorted(named)) or 'no group'}")
        return named, False

    def _receive(self, client, queue: str, limit: int, wait_seconds: int) -> list[dict]:
        """Up to `limit` messages of the queue, long-polled 10 at a time, until an empty answer. They
        stay in the queue, invisible for VISIBILITY_SECONDS, until deleted."""
        messages: dict[str, dict] = {}
        while len(messages) < limit:
            answer = client.receive_message(QueueUrl=queue,
                                            MaxNumberOfMessages=min(RECEIVE_BATCH, limit - len(messages)),
                                            WaitTimeSeconds=wait_seconds, VisibilityTimeout=VISIBILITY_SECONDS)
            if not answer.get("Messages"):
                break
            for message in answer["Messages"]:
                messages.setdefault(message["MessageId"], message)  # at-least-once: a duplicate is one message
        return list(messages.values())

    def _rebuild(self, groups: set[str], everything: bool) -> None:
        out = {"verbosity": self.verbosity, "stdout": self.stdout, "stderr": self.stderr}
        if everything:
            call_command("rebuild_index", **out)
            return
        for source in sources:
            values = sorted(source.group_value(g) for g in groups if source.owns(g))
            if values:
                call_command("rebuild_index", source=[source.name], group=values, **out)


def _batch_records(client, info: dict) -> list[dict]:
    """The records a message names, read again from the stream (AT its first sequence number)."""
    iterator = client.get_shard_iterator(StreamArn=info["streamArn"], ShardId=info["shardId"],
                                         ShardIteratorType="AT_SEQUENCE_NUMBER",
                                         SequenceNumber=info["startSequenceNumber"])["ShardIterator"]
    end, records = int(info["endSequenceNumber"]), []
    for _ in range(MAX_PAGES):  # an open shard may answer empty pages before its records
        if not iterator:
            break
        page = client.get_records(ShardIterator=iterator, Limit=1000)
        for record in page.get("Records", []):
            if int(record["dynamodb"]["SequenceNumber"]) > end:
                return records
            records.append(record)
        if len(records) >= int(info["batchSize"]):
            return records
        iterator = page.get("NextShardIterator")
    return records
