"""What the library tells its host project, as Django signals: metrics, request tagging and logs
are the project's business, connected in its AppConfig.ready() (the shop's: metrics/apps.py).
Nothing here is sent on a hot path unless a receiver is connected (Signal.send returns at once
without receivers).
"""
from django.dispatch import Signal

# A backend was made from settings (sender: its class; index=): time or wrap its calls.
index_loaded = Signal()
# The library made a botocore client (sender: the service name; client=, use=): count its calls.
aws_client_created = Signal()
# A call the library sent without a botocore client (the page path's Query: pagination_index.aws.direct)
# was answered (sender: the operation name; error_code= None or the AWS error code, retries=).
aws_call_answered = Signal()
# sync_index: a consumer is about to follow the stream (sender: StreamConsumer; consumer=).
consumer_started = Signal()
# sync_index: one poll of the stream is done (sender: StreamConsumer; consumer=, result= PollResult).
stream_polled = Signal()
# The Lambda handler finished an invocation (sender: None; records=, failed= how many it left to Lambda).
lambda_batch_done = Signal()
# A stream record could not be applied and was given up on (sender: "sync_index" or "lambda";
# record= the stream record, groups= the groups marked stale for it, error= the exception).
record_given_up = Signal()
