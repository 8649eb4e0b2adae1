"""Per-partition throughput limits: a partition key value (of a table or of a GSI) takes at most
3,000 read units and 1,000 write units a second (AWS's "Best practices for designing and using
partition keys effectively"; on-demand tables too), with a short burst allowance. A partition past
its limit is answered ProvisionedThroughputExceededException with a ThrottlingReason
"TableReadKeyRangeThroughputExceeded" (or Index/Write...) naming the table or index, which is what AWS
answers for a hot key range in either capacity mode ("DynamoDB throttling resolution guide").

Token buckets per (table, index, read/write, key value), `rate` units a second, holding at most
`rate * burst_seconds`; a request is refused while its partition's bucket is empty, and its units are
taken afterwards (a request's cost is known only once it is answered), so a bucket may go below zero
and then refuses until it has refilled."""
from __future__ import annotations

from dataclasses import dataclass

from stack.strict_endpoint.errors import AwsError

DEFAULTS = {"enabled": True, "read_units": 3000.0, "write_units": 1000.0, "burst_seconds": 1.0}


@dataclass
class Bucket:
    tokens: float
    at: float


class PartitionThrottle:
    def __init__(self, settings: dict | None = None):
        self.configure(settings or {})

    def configure(self, settings: dict) -> None:
        unknown = set(settings) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown throttle settings {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        self.settings = {**DEFAULTS, **settings}
        self._buckets: dict[tuple, Bucket] = {}

    def _bucket(self, key: tuple, now: float) -> Bucket:
        rate = self.settings["read_units" if key[2] == "read" else "write_units"]
        capacity = rate * self.settings["burst_seconds"]
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = Bucket(capacity, now)
        bucket.tokens = min(capacity, bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        return bucket

    def check(self, partitions: list[tuple[str, str | None, str, str]], now: float, arn) -> None:
        """Refuse when any (table, index, "read"/"write", key value) partition is out of units."""
        if not self.settings["enabled"]:
            return
        for key in partitions:
            if key in self._buckets and self._bucket(key, now).tokens <= 0:
                table, index, kind, _ = key
                reason = f"{'Index' if index else 'Table'}{kind.title()}KeyRangeThroughputExceeded"
                raise AwsError("ProvisionedThroughputExceededException",
                               "The level of configured provisioned throughput for the table was exceeded. "
                               "Consider increasing your provisioning level with the UpdateTable API.",
                               ThrottlingReasons=[{"reason": reason, "resource": arn(table, index)}])

    def take(self, charges, now: float) -> None:
        if not self.settings["enabled"]:
            return
        for charge in charges:
            if charge.partition is None:
                continue
            for kind, units in (("read", charge.read), ("write", charge.write)):
                if units:
                    self._bucket((charge.table, charge.index, kind, charge.partition), now).tokens -= units

    @staticmethod
    def partitions_of(charges) -> list[tuple]:
        return [(c.table, c.index, kind, c.partition) for c in charges if c.partition is not None
                for kind, units in (("read", c.read), ("write", c.write)) if units]
