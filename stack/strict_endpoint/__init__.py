"""The strict DynamoDB endpoint: a TLS proxy in front of DynamoDB Local that answers as AWS does
(docs/testing.md, "The strict DynamoDB endpoint"). `StrictEndpoint` runs it as a child process."""
from stack.strict_endpoint.process import StrictEndpoint, StrictEndpointError

__all__ = ["StrictEndpoint", "StrictEndpointError"]
