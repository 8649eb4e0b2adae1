from django.apps import AppConfig


class CommentsConfig(AppConfig):
    name = "comments"
    verbose_name = "Comments (DynamoDB)"
