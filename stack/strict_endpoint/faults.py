"""Faults injected per operation at set rates, deterministic for a seed (one random generator for
the decisions, another for latency, so turning latency on does not move which requests fail).

A rule: {"kind": ..., "rate": 0..1, "operations": [...] (default every operation), "tables": [...]
(default every table)} plus, by kind:
- "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded" (400),
  "InternalServerError" (500), "ServiceUnavailable" (503): answered instead of forwarding;
- "UnprocessedItems" (BatchWriteItem, BatchGetItem): `fraction` (default 0.5) of the items are taken
  out of the request before it is forwarded and returned as UnprocessedItems/UnprocessedKeys, so they
  really stay undone (at least one is processed: AWS answers a batch of which nothing could be done
  with ProvisionedThroughputExceededException, which is what a one-item batch gets here);
- "TransactionCanceled" (TransactWriteItems, TransactGetItems): TransactionCanceledException with a
  CancellationReasons entry per item, `reason` ("TransactionConflict", "ThrottlingError",
  "ValidationError") on one of them and "None" on the others; nothing is written;
- "ConnectionReset": the TCP connection is reset without an answer, before the request is forwarded,
  or after (`"after_forward": true`: done, but the client never hears so).
Latency: {"base_ms": 3, "jitter_ms": 2, "tail_ms": 40, "tail_rate": 0.02}: every request waits
base + uniform(0, jitter) ms, and tail_ms more at tail_rate."""
from __future__ import annotations

import random
from dataclasses import dataclass

from stack.strict_endpoint.errors import AwsError

ANSWERED = {
    "ProvisionedThroughputExceededException": (400, "The level of configured provisioned throughput for the table was "
                                               "exceeded. Consider increasing your provisioning level with the "
                                               "UpdateTable API."),
    "ThrottlingException": (400, "Rate of requests exceeds the allowed throughput."),
    "RequestLimitExceeded": (400, "Throughput exceeds the current throughput limit for your account. Please contact "
                             "AWS Support at https://aws.amazon.com/support request a limit increase"),
    "InternalServerError": (500, "Internal server error"),
    "ServiceUnavailable": (503, "Service unavailable"),
}
KINDS = set(ANSWERED) | {"UnprocessedItems", "TransactionCanceled", "ConnectionReset"}
REASONS = {"TransactionConflict": "Transaction is ongoing for the item",
           "Conflict": "Transaction is ongoing for the item",
           "ThrottlingError": "Throughput exceeds the current capacity of your table or index. DynamoDB is "
                              "automatically scaling your table or index so please try again shortly.",
           "ValidationError": "Item size has exceeded the maximum allowed size"}
APPLIES_TO = {"UnprocessedItems": {"BatchWriteItem", "BatchGetItem"},
              "TransactionCanceled": {"TransactWriteItems", "TransactGetItems"}}


@dataclass
class Rule:
    kind: str
    rate: float
    operations: frozenset | None = None
    tables: frozenset | None = None
    fraction: float = 0.5
    reason: str = "TransactionConflict"
    after_forward: bool = False

    def matches(self, operation: str, tables: list[str]) -> bool:
        if self.operations is not None and operation not in self.operations:
            return False
        if self.kind in APPLIES_TO and operation not in APPLIES_TO[self.kind]:
            return False
        return self.tables is None or any(table in self.tables for table in tables)


def parse_rule(data: dict) -> Rule:
    kind = data.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; known: {sorted(KINDS)}")
    rate = float(data.get("rate", 1.0))
    if not 0 <= rate <= 1:
        raise ValueError("a fault's rate is between 0 and 1")
    reason = data.get("reason", "TransactionConflict")
    if kind == "TransactionCanceled" and reason not in REASONS:
        raise ValueError(f"unknown cancellation reason {reason!r}; known: {sorted(REASONS)}")
    return Rule(kind, rate, frozenset(data["operations"]) if data.get("operations") else None,
                frozenset(data["tables"]) if data.get("tables") else None, float(data.get("fraction", 0.5)),
                "TransactionConflict" if reason == "Conflict" else reason, bool(data.get("after_forward", False)))


class Faults:
    def __init__(self, settings: dict | None = None):
        self.configure(settings or {})

    def configure(self, settings: dict) -> None:
        self.rules = [parse_rule(rule) for rule in settings.get("rules", [])]
        self.latency = dict(settings.get("latency") or {})
        unknown = set(self.latency) - {"base_ms", "jitter_ms", "tail_ms", "tail_rate"}
        if unknown:
            raise ValueError(f"unknown latency settings {sorted(unknown)}")
        self.seed = settings.get("seed", 0)
        self.settings = {"seed": self.seed, "rules": settings.get("rules", []), "latency": self.latency}
        self._decisions = random.Random(f"faults:{self.seed}")
        self._delays = random.Random(f"latency:{self.seed}")

    def pick(self, operation: str, tables: list[str]) -> Rule | None:
        """The first matching rule whose draw hits (each matching rule draws once per request)."""
        for rule in self.rules:
            if rule.matches(operation, tables) and self._decisions.random() < rule.rate:
                return rule
        return None

    def delay(self) -> float:
        """Seconds this request waits before it is answered."""
        if not self.latency:
            return 0.0
        ms = self.latency.get("base_ms", 0) + self._delays.uniform(0, self.latency.get("jitter_ms", 0))
        if self._delays.random() < self.latency.get("tail_rate", 0):
            ms += self.latency.get("tail_ms", 0)
        return ms / 1000

    @property
    def rng(self) -> random.Random:
        """The decisions' generator, for what a fault then picks (which items, which reason slot)."""
        return self._decisions


def answered_error(kind: str) -> AwsError:
    status, message = ANSWERED[kind]
    return AwsError(kind, message, status=status)


def cancellation(rule: Rule, items: int, rng: random.Random) -> AwsError:
    hit = rng.randrange(items) if items else 0
    reasons = [{"Code": rule.reason, "Message": REASONS[rule.reason]} if i == hit else {"Code": "None"}
               for i in range(max(items, 1))]
    codes = ", ".join(reason["Code"] for reason in reasons)
    return AwsError("TransactionCanceledException",
                    f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
                    CancellationReasons=reasons)


def split_batch(operation: str, params: dict, rule: Rule, rng: random.Random) -> tuple[dict, dict] | None:
    """(the request with some items taken out, those items in UnprocessedItems/Keys shape); None when
    the batch has a single item (then the whole request is refused, as AWS does)."""
    entries = []
    for table, value in params.get("RequestItems", {}).items():
        items = value if operation == "BatchWriteItem" else value.get("Keys", [])
        entries += [(table, i) for i in range(len(items))]
    if len(entries) < 2:
        return None
    count = min(len(entries) - 1, max(1, round(len(entries) * rule.fraction)))
    held = set(rng.sample(entries, count))
    kept: dict = {}
    unprocessed: dict = {}
    for table, value in params["RequestItems"].items():
        if operation == "BatchWriteItem":
            kept_items = [item for i, item in enumerate(value) if (table, i) not in held]
            held_items = [item for i, item in enumerate(value) if (table, i) in held]
            if kept_items:
                kept[table] = kept_items
            if held_items:
                unprocessed[table] = held_items
        else:
            keys = value.get("Keys", [])
            kept_keys = [k for i, k in enumerate(keys) if (table, i) not in held]
            held_keys = [k for i, k in enumerate(keys) if (table, i) in held]
            rest = {name: v for name, v in value.items() if name != "Keys"}
            if kept_keys:
                kept[table] = {**rest, "Keys": kept_keys}
            if held_keys:
                unprocessed[table] = {**rest, "Keys": held_keys}
    return {**params, "RequestItems": kept}, unprocessed
