import json
from pathlib import Path

from botocore.exceptions import ClientError
from django.core.management import call_command
from django.core.management.base import CommandError

from pagination_index import get_index, sources
from pagination_index.management import ReportingCommand, reports_unavailable
from pagination_index.models import StaleGroup
from pagination_index.sources import records_ops, table_of_stream
from pagination_index.stale import stale_groups_mark
from pagination_index.stream import checkpoint_database

MAX_PAGES = 100


class Command(ReportingCommand):
    help = (
        "Repair what the Lambda event-source mapping gave up on: read its on-failure destination's messages "
        "(DDBStreamBatchInfo: shard and sequence-number range), read those records again from the stream, "
        "mark the groups they touch as needing a rebuild and, with --rebuild, rebuild them. When the records "
        "are no longer in the stream, every group is marked. Each message is moved to done/ once handled."
    )

    def add_arguments(self, parser):
        parser.add_argument("destination", type=Path,
                            help="The folder the mapping writes its on-failure messages to (one JSON file each).")
        parser.add_argument("--rebuild", action="store_true", help="Rebuild the groups named (as rebuild_index does).")
        parser.add_argument("--dry-run", action="store_true", help="Only print what the messages name.")

    @reports_unavailable
    def handle(self, *args, destination, rebuild, dry_run, **options):
        if not destination.is_dir():
            raise CommandError(f"{destination} is not a folder of on-failure messages")
        messages = sorted(destination.glob("*.json"))
        database = checkpoint_database(get_index())
        groups: set[str] = set()
        everything = False
        for path in messages:
            try:
                info = json.loads(path.read_text())["DDBStreamBatchInfo"]
            except (ValueError, KeyError) as exc:
                raise CommandError(f"{path}: not an on-failure message of a DynamoDB stream ({exc})") from None
            declared = sources.for_table(table_of_stream(info["streamArn"]))
            if not declared:
                raise CommandError(f"{path}: no source is declared on the table of {info['streamArn']}")
            try:
                named = {op.group for op in records_ops(declared, _batch_records(declared[0].stream_client(), info))}
            except ClientError as exc:
                self.warn(f"{path.name}: the records of {info['shardId']} from {info['startSequenceNumber']} are no "
                          f"longer in the stream ({exc.response['Error']['Code']}): every group may be wrong")
                everything = True
                named = set()
            self.note(f"{path.name}: {info['batchSize']} records of {info['shardId']}: "
                      f"{', '.join(sorted(named)) or 'no group'}")
            groups |= named
        if dry_run or not messages:
            self.summary(f"{len(messages)} message(s); groups named: {', '.join(sorted(groups)) or 'none'}")
            return
        reason = f"records the Lambda mapping gave up on ({len(messages)} on-failure message(s))"
        if everything:
            stale_groups_mark(groups=[StaleGroup.ALL], reason=reason, using=database)
        elif groups:
            stale_groups_mark(groups=groups, reason=reason, using=database)
        done = destination / "done"
        done.mkdir(exist_ok=True)
        for path in messages:
            path.rename(done / path.name)
        if rebuild:
            if everything:
                call_command("rebuild_index", verbosity=options["verbosity"], stdout=self.stdout, stderr=self.stderr)
            for source in ([] if everything else sources):
                values = sorted(source.group_value(g) for g in groups if source.owns(g))
                if values:
                    call_command("rebuild_index", source=[source.name], group=values,
                                 verbosity=options["verbosity"], stdout=self.stdout, stderr=self.stderr)
        self.summary(f"{len(messages)} message(s) handled; "
                     + ("every group marked" if everything else f"marked: {', '.join(sorted(groups))}")
                     + ("; rebuilt" if rebuild else "; run `rebuild_index` (or this command with --rebuild)"))


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
