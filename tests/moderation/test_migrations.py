"""The moderation app's data migrations run on the database being migrated (`migrate --database`)."""
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

ALIAS = "moderation_migrations"


def test_repeated_open_reports_are_closed_in_the_database_being_migrated(django_db_blocker, tmp_path):
    # A database of the test's own beside the test databases, outside pytest-django's test case
    # (which allows only the aliases it knew at its start).
    with django_db_blocker.unblock():
        migrate_another_database(tmp_path)


def migrate_another_database(tmp_path):
    settings.DATABASES[ALIAS] = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "other.sqlite3")}
    connections.configure_settings(settings.DATABASES)  # fills the new alias's defaults
    try:
        call_command("migrate", "moderation", "0002", database=ALIAS, verbosity=0)
        state = MigrationExecutor(connections[ALIAS]).loader.project_state(("moderation", "0002_moderators_group"))
        comments = state.apps.get_model("moderation", "ModeratedComment").objects.using(ALIAS)
        reports = state.apps.get_model("moderation", "Report").objects.using(ALIAS)
        comment = comments.create(comment_id="c1", created_sk="2026-01-01T00:00:00.000000Z", sku="SKU", open_reports=3)
        for _ in range(3):
            reports.create(comment=comment, reason="spam", client_hash="same client")
        reports.create(comment=comment, reason="spam", client_hash="another client")

        call_command("migrate", "moderation", "0003", database=ALIAS, verbosity=0)

        assert reports.filter(dismissed=False).count() == 2
        assert comments.get(id=comment.id).open_reports == 2
    finally:
        connections[ALIAS].close()
        del connections[ALIAS]
        settings.DATABASES.pop(ALIAS)
