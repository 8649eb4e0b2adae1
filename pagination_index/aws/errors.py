"""The one classification of AWS error codes: what botocore's standard retry mode retries (throttles
and transient failures), and among those, the throttles. botocore retries single calls; the project
reads these only to decide what a failure that outlasted those retries means (an outage to wait out,
a throttle to count) and for the page path's Query, which is sent without botocore's pipeline
(direct.py) within the same rules.
"""
from __future__ import annotations

from botocore.exceptions import ClientError

# botocore/retries/standard.py: the throttling codes of the standard mode (ThrottledRetryableChecker).
THROTTLE_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "ProvisionedThroughputExceededException", "TransactionInProgressException",
    "RequestLimitExceeded", "BandwidthLimitExceeded", "LimitExceededException", "RequestThrottled", "SlowDown",
    "PriorRequestNotComplete", "EC2ThrottledException",
})
# ... and its transient codes (TransientRetryableChecker), besides any 5xx answer.
TRANSIENT_CODES = frozenset({"RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete",
                             "InternalServerError", "ServiceUnavailable"})
RETRYABLE_CODES = THROTTLE_CODES | TRANSIENT_CODES


def error_code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


def is_throttle(code: str | None) -> bool:
    return code in THROTTLE_CODES


def is_retryable(code: str, status: int) -> bool:
    """What botocore's standard mode would try again: a throttle, a transient code, or any 5xx."""
    return code in RETRYABLE_CODES or status >= 500


def is_transient(exc: ClientError) -> bool:
    """A failure that may go away by itself (the store is unavailable, not the request wrong)."""
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return is_retryable(error_code(exc), status)
