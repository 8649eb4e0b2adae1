"""Point-in-time recovery settings, which DynamoDB Local does not implement (it answers
UnknownOperationException): the endpoint answers UpdateContinuousBackups and
DescribeContinuousBackups itself, in AWS's shapes (DynamoDB API Reference), so `create_tables`
turning PITR on is exercised, authorized and checked like any other call."""
from __future__ import annotations

import time

from stack.strict_endpoint.errors import AwsError

OPERATIONS = {"UpdateContinuousBackups", "DescribeContinuousBackups"}
RECOVERY_PERIOD_DAYS = 35  # AWS's default


class ContinuousBackups:
    def __init__(self, tables):
        self.tables = tables
        self._enabled: dict[str, float] = {}  # table -> when PITR was turned on

    async def handle(self, operation: str, params: dict) -> dict:
        table = params.get("TableName", "")
        if await self.tables.schema(table) is None:
            raise AwsError("TableNotFoundException", f"Table not found: {table}")
        if operation == "UpdateContinuousBackups":
            wanted = params.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled")
            if not isinstance(wanted, bool):
                raise AwsError("ValidationException", "PointInTimeRecoverySpecification.PointInTimeRecoveryEnabled "
                               "is required")
            if wanted:
                self._enabled.setdefault(table, time.time())
            else:
                self._enabled.pop(table, None)
        return {"ContinuousBackupsDescription": self.describe(table)}

    def describe(self, table: str) -> dict:
        since = self._enabled.get(table)
        if since is None:
            recovery = {"PointInTimeRecoveryStatus": "DISABLED"}
        else:
            recovery = {"PointInTimeRecoveryStatus": "ENABLED", "RecoveryPeriodInDays": RECOVERY_PERIOD_DAYS,
                        "EarliestRestorableDateTime": since, "LatestRestorableDateTime": time.time()}
        return {"ContinuousBackupsStatus": "ENABLED", "PointInTimeRecoveryDescription": recovery}

    def forget(self, table: str) -> None:
        self._enabled.pop(table, None)
