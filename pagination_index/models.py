from django.db import models

# Sort keys are any text (DynamoDB allows 1,024 bytes); members, the table key beside it. With the
# group (255), one entry of the rank index stays under PostgreSQL's B-tree limit for plain text.
SORT_KEY_LENGTH = 1024
MEMBER_LENGTH = 512


class IndexEntry(models.Model):
    """One (member, sort_key) of a group, for the relational backend."""

    group = models.CharField(max_length=255)
    member = models.CharField(max_length=MEMBER_LENGTH)
    sort_key = models.CharField(max_length=SORT_KEY_LENGTH)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["group", "member"], name="pagination_index_entry_member"),
        ]
        indexes = [
            # Covering index in index order: a rank read never touches the table.
            models.Index(fields=["group", "-sort_key", "-member"], name="pagination_index_entry_rank"),
        ]

    def __str__(self):
        return f"{self.group}: {self.member} @ {self.sort_key}"


class IndexGroup(models.Model):
    """Per-group entry count, kept in step with IndexEntry so count() never scans."""

    name = models.CharField(max_length=255, unique=True)
    count = models.BigIntegerField(default=0)
    # How many levels of IndexBlock the group has; 0 until its blocks are first built.
    levels = models.PositiveSmallIntegerField(default=0)
    # Bumped by every write to the group, so a multi-query read can tell it saw one state.
    version = models.BigIntegerField(default=0)

    def __str__(self):
        return f"{self.name} ({self.count})"


class IndexBlock(models.Model):
    """A counted run of a group's sort order: one node of the rank tree (backends/blocks.py).

    A block covers the keys (sort_key, member) from its floor up to the next floor of its level;
    `count` is how many entries fall in that range, at every level.
    """

    group = models.ForeignKey(IndexGroup, on_delete=models.CASCADE, related_name="blocks", db_index=False)
    level = models.PositiveSmallIntegerField()
    floor_sort_key = models.CharField(max_length=SORT_KEY_LENGTH)
    floor_member = models.CharField(max_length=MEMBER_LENGTH)
    count = models.BigIntegerField()

    class Meta:
        constraints = [
            # Also the index every block lookup and level scan uses.
            models.UniqueConstraint(
                fields=["group", "level", "floor_sort_key", "floor_member"], name="pagination_index_block_floor"
            ),
        ]

    def __str__(self):
        return f"{self.group_id}/{self.level}: {self.floor_sort_key} {self.floor_member} ({self.count})"


class ShardCheckpoint(models.Model):
    """The last stream record applied to the index, per shard, and the lease on reading it.

    Only the lease holder (lease_owner, until lease_expires_at) may apply the shard's records; a
    consumer that dies keeps it until it expires, then another takes over from the checkpoint.
    """

    stream_arn = models.CharField(max_length=512)
    shard_id = models.CharField(max_length=128)
    parent_shard_id = models.CharField(max_length=128, blank=True, default="")
    sequence_number = models.CharField(max_length=64, blank=True, default="")
    finished = models.BooleanField(default=False)
    last_record_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    lease_owner = models.CharField(max_length=255, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # The lease's fencing token: one more each time another owner takes the lease. An index outside
    # the checkpoints' database refuses writes carrying an older epoch than it has seen (leases.py).
    lease_epoch = models.BigIntegerField(default=0)
    applied_at = models.DateTimeField(null=True, blank=True)
    # Seconds from the last applied record's ApproximateCreationDateTime to its apply.
    lag_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["stream_arn", "shard_id"], name="pagination_index_checkpoint_shard"),
        ]

    def __str__(self):
        return f"{self.shard_id} @ {self.sequence_number or 'TRIM_HORIZON'}"


class LagSample(models.Model):
    """How far behind the table the index was, sampled by the stream consumer (for /ops/'s chart).

    `lag_seconds` is the largest age seen since the previous sample of a record when it was applied;
    0 means the consumer was caught up. A gap in the samples means the consumer was not running.
    """

    at = models.DateTimeField(db_index=True)
    lag_seconds = models.FloatField()

    def __str__(self):
        return f"{self.at:%H:%M:%S} {self.lag_seconds:.1f}s"


class StaleGroup(models.Model):
    """A group that may have lost stream records; verify_index fails until it is rebuilt.

    group "*" stands for groups the index did not hold when the loss was found: only a full
    rebuild clears it.
    """

    ALL = "*"

    group = models.CharField(max_length=255, unique=True)
    reason = models.TextField()
    detected_at = models.DateTimeField()

    def __str__(self):
        return f"{self.group}: {self.reason}"


class GivenUpRecord(models.Model):
    """The dead-letter table: a stream record that could never be applied, kept whole, with why, so
    that nothing is dropped unnoticed and `repair_index_failures --given-up` can rebuild its groups.

    One row per record and consumer (a record given up on twice, e.g. a batch replayed after a crash,
    stays one row); `repaired_at` is set once its groups have been rebuilt.
    """

    stream_arn = models.CharField(max_length=2048, blank=True)
    shard_id = models.CharField(max_length=255, blank=True)
    sequence_number = models.CharField(max_length=64)
    event_name = models.CharField(max_length=16, blank=True)
    record = models.JSONField()
    groups = models.JSONField(default=list)  # the groups it concerned ("*": unknown) when given up on
    error = models.TextField()
    via = models.CharField(max_length=32)  # "sync_index" or "lambda"
    given_up_at = models.DateTimeField()
    repaired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["stream_arn", "sequence_number", "via"],
                                               name="given_up_record_once")]
        indexes = [models.Index(fields=["repaired_at", "given_up_at"], name="given_up_record_open")]

    def __str__(self):
        return f"{self.sequence_number} ({self.event_name}) by {self.via}"


class RebuildFence(models.Model):
    """A group a rebuild is refilling right now: the stream's ops for it go to RebuildJournal
    instead of the index until the rebuild has swapped the group in and replayed them, so no write
    made during the rebuild is lost and no other group waits (pagination_index/fences.py).

    A rebuild renews `expires_at` while it works; a fence left by a rebuild that died is drained
    by the next consumer that meets it once it has expired.
    """

    group = models.CharField(max_length=255, unique=True)
    owner = models.CharField(max_length=255)
    opened_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    def __str__(self):
        return f"{self.group} (rebuild {self.owner})"


class RebuildJournal(models.Model):
    """One stream op held back for a fenced group, replayed in id order after the group's swap."""

    group = models.CharField(max_length=255)
    # "+" add, "-" remove (a remove's sort_key: the entry's it must still have, blank for any).
    kind = models.CharField(max_length=1)
    member = models.CharField(max_length=MEMBER_LENGTH)
    sort_key = models.CharField(max_length=SORT_KEY_LENGTH, blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["group", "id"], name="pagination_index_journal_grp")]

    def __str__(self):
        return f"{self.group}: {self.kind}{self.member}"


class RebuildCheckpoint(models.Model):
    """A unit (a product and its groups, a Scan segment) a long command's run has finished, or
    where it stopped, so `--resume` goes on from there; a run without --resume starts by clearing
    its command's rows."""

    run = models.CharField(max_length=64)
    unit = models.CharField(max_length=255)
    done_at = models.DateTimeField(auto_now_add=True)
    # Where an unfinished unit stopped (backfill_rating_keys: a Scan segment's LastEvaluatedKey as
    # JSON); blank once it is finished.
    position = models.TextField(blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "unit"], name="pagination_index_rebuild_unit")]

    def __str__(self):
        return f"{self.run}: {self.unit}"
