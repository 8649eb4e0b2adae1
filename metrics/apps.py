"""The shop's metrics, connected to what the pagination index reports (pagination_index.signals)."""
from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "metrics"
    verbose_name = "Metrics"

    def ready(self):
        from pagination_index import signals

        from metrics import receivers

        signals.index_loaded.connect(receivers.index_loaded, dispatch_uid="metrics.index_loaded")
        signals.aws_client_created.connect(receivers.aws_client_created, dispatch_uid="metrics.aws_client_created")
        signals.aws_call_answered.connect(receivers.aws_call_answered, dispatch_uid="metrics.aws_call_answered")
        signals.consumer_started.connect(receivers.consumer_started, dispatch_uid="metrics.consumer_started")
        signals.stream_polled.connect(receivers.stream_polled, dispatch_uid="metrics.stream_polled")
        signals.lambda_batch_done.connect(receivers.lambda_batch_done, dispatch_uid="metrics.lambda_batch_done")
        signals.record_given_up.connect(receivers.record_given_up, dispatch_uid="metrics.record_given_up")
