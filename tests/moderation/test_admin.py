"""The staff screen: the queue, its search, the actions and the audit log, through Django's admin."""
import importlib
import types

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from moderation import services, table
from moderation.models import AuditEntry, ModeratedComment
from tests import factories

SKU = "ADM-1"
QUEUE = "/admin/moderation/moderatedcomment/"
AUDIT = "/admin/moderation/auditentry/"


@pytest.fixture
def comments(db, comments_table):
    factories.product(SKU, "Toaster")
    comments = factories.seed(SKU, 4, seed=8)
    for comment, times in zip(comments, (1, 3, 2)):
        for _ in range(times):
            services.report_create(comment=table.find_comment(comment.pk), reason="abuse", note="",
                                   client_hash=f"client-{_}")  # one client reports a comment once
    return comments


@pytest.fixture
def moderator(moderators):
    user = User.objects.create_user("mia", password="pw-mia-123", is_staff=True)
    user.groups.add(moderators)
    client = Client()
    client.force_login(user)
    return client


def act(client, action, comments, reason="rule 3"):
    ids = ModeratedComment.objects.filter(comment_id__in=[c.pk for c in comments]).values_list("pk", flat=True)
    return client.post(QUEUE, {"action": action, "_selected_action": list(ids), "reason": reason}, follow=True)


def test_the_migration_makes_a_moderators_group_that_may_moderate(db):
    # A transactional test run earlier in the same process flushes the database, the migration's
    # rows included: run the migration's step again, on the models as they stood after it.
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    migration = importlib.import_module("moderation.migrations.0002_moderators_group")
    state = MigrationExecutor(connection).loader.project_state(("moderation", "0002_moderators_group"))
    Group.objects.filter(name="Moderators").delete()
    migration.add_group(state.apps, types.SimpleNamespace(connection=connection))
    group = Group.objects.get(name="Moderators")
    assert sorted(group.permissions.values_list("codename", flat=True)) == [
        "moderate_comment", "view_auditentry", "view_moderatedcomment", "view_report"]


def test_the_queue_shows_the_most_reported_first_and_searches(comments, moderator):
    page = moderator.get(QUEUE)
    assert page.status_code == 200
    queue = list(page.context["cl"].result_list)
    assert [record.comment_id for record in queue] == [comments[1].pk, comments[2].pk, comments[0].pk]
    found = moderator.get(QUEUE, {"q": comments[2].author}).context["cl"].result_list
    assert [record.comment_id for record in found] == [comments[2].pk]
    assert moderator.get(QUEUE, {"q": SKU}).context["cl"].result_count == 3
    assert moderator.get(QUEUE, {"q": "Comment body 0"}).context["cl"].result_count == 1


def test_hide_unhide_delete_and_dismiss_from_the_queue_are_audited(comments, moderator):
    act(moderator, "comment_hide", comments[:1])
    assert table.find_comment(comments[0].pk).hidden
    assert ModeratedComment.objects.get(comment_id=comments[0].pk).state == "hidden"
    act(moderator, "comment_unhide", comments[:1], reason="appeal")
    assert not table.find_comment(comments[0].pk).hidden
    act(moderator, "reports_dismiss", comments[1:2], reason="fine")
    assert ModeratedComment.objects.get(comment_id=comments[1].pk).open_reports == 0
    act(moderator, "comment_delete", comments[2:3], reason="illegal")
    assert table.find_comment(comments[2].pk) is None
    assert list(AuditEntry.objects.order_by("id").values_list("actor_name", "action", "comment_id", "reason")) == [
        ("mia", "hide", comments[0].pk, "rule 3"), ("mia", "unhide", comments[0].pk, "appeal"),
        ("mia", "dismiss", comments[1].pk, "fine"), ("mia", "delete", comments[2].pk, "illegal")]
    log = moderator.get(AUDIT)
    assert log.status_code == 200 and log.context["cl"].result_count == 4


def test_an_action_without_a_reason_changes_nothing(comments, moderator):
    response = act(moderator, "comment_hide", comments[:1], reason="")
    assert "Give a reason" in response.content.decode()
    assert not table.find_comment(comments[0].pk).hidden and not AuditEntry.objects.exists()


def test_the_audit_log_and_the_queue_cannot_be_edited(comments, moderator):
    act(moderator, "comment_hide", comments[:1])
    entry = AuditEntry.objects.get()
    record = ModeratedComment.objects.get(comment_id=comments[0].pk)
    assert moderator.get(f"{AUDIT}add/").status_code == 403
    assert moderator.post(f"{AUDIT}{entry.pk}/change/", {"reason": "nothing happened"}).status_code == 403
    assert moderator.post(f"{AUDIT}{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert moderator.post(f"{QUEUE}{record.pk}/change/", {"body": "rewritten"}).status_code == 403
    assert AuditEntry.objects.get().reason == "rule 3" and ModeratedComment.objects.get(pk=record.pk).body


def test_staff_outside_moderators_get_a_403_and_shoppers_the_login_page(comments, db):
    viewer = User.objects.create_user("vic", password="pw-vic-123", is_staff=True)
    client = Client()
    client.force_login(viewer)
    assert client.get(QUEUE).status_code == 403  # no view permission either
    client.force_login(User.objects.create_user("sam", password="x", is_staff=False))
    response = client.get(QUEUE)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    assert Client().get(AUDIT)["Location"].startswith("/admin/login/")
