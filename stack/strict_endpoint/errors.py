"""AWS's error answers in DynamoDB's JSON shape, which botocore parses into ClientError codes.

DynamoDB answers `{"__type": "<namespace>#<Code>", "message": "..."}` with the `x-amzn-RequestId` and
`x-amz-crc32` headers (AWS's developer guide, "Error handling with DynamoDB"); botocore takes the code
from after the "#". Authentication errors come from AWS's front end (namespace com.amazon.coral.service),
DynamoDB's own from com.amazonaws.dynamodb.v20120810.
"""
from __future__ import annotations

import json
import uuid
import zlib

CORAL = "com.amazon.coral.service"
DYNAMODB = "com.amazonaws.dynamodb.v20120810"
JSON_CONTENT_TYPE = "application/x-amz-json-1.0"


def request_id() -> str:
    """A request id shaped like DynamoDB's: 52 characters of [A-Z0-9]."""
    return (uuid.uuid4().hex + uuid.uuid4().hex).upper()[:52]


def json_headers(body: bytes, rid: str) -> dict[str, str]:
    return {"Content-Type": JSON_CONTENT_TYPE, "x-amzn-RequestId": rid, "x-amz-crc32": str(zlib.crc32(body))}


class AwsError(Exception):
    """An error answer: HTTP status, code, message, and any extra members (CancellationReasons,
    ThrottlingReasons)."""

    def __init__(self, code: str, message: str, *, status: int = 400, namespace: str = DYNAMODB,
                 message_key: str = "message", **extra):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status
        self.namespace, self.message_key, self.extra = namespace, message_key, extra

    def body(self) -> bytes:
        return json.dumps({"__type": f"{self.namespace}#{self.code}", self.message_key: self.message,
                           **self.extra}).encode()


# The authentication answers, worded as AWS words them.
def missing_authentication() -> AwsError:
    return AwsError("MissingAuthenticationTokenException", "Request is missing Authentication Token",
                    namespace=CORAL)


def unrecognized_client() -> AwsError:
    return AwsError("UnrecognizedClientException", "The security token included in the request is invalid.",
                    namespace=CORAL)


def expired_token() -> AwsError:
    return AwsError("ExpiredTokenException", "The security token included in the request is expired",
                    namespace=CORAL)


def incomplete_signature(detail: str) -> AwsError:
    return AwsError("IncompleteSignatureException", detail, namespace=CORAL)


def invalid_signature(detail: str = "The request signature we calculated does not match the signature you "
                      "provided. Check your AWS Secret Access Key and signing method. Consult the service "
                      "documentation for details.") -> AwsError:
    return AwsError("InvalidSignatureException", detail, namespace=CORAL)


def access_denied(message: str) -> AwsError:
    return AwsError("AccessDeniedException", message, namespace=CORAL, message_key="Message")


def unknown_operation() -> AwsError:
    return AwsError("UnknownOperationException", "", namespace=CORAL)
