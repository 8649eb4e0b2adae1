"""Hide, unhide, delete and erase on DynamoDB Local, followed through the stream into the index
(sync_index) and checked with verify_index."""
import pytest
from django.core.management import call_command

from comments.selectors import product_comment_page
from comments.table.client import dynamodb
from comments.table.keys import table_name
from moderation import services, table
from moderation.models import AuditEntry, ModeratedComment
from pagination_index import get_index
from tests import factories
from tests.config import set_pages

SKU = "MOD-1"
pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(comments_table, settings):
    set_pages(settings, 5, 2)
    factories.product(SKU)
    comments = factories.seed(SKU, 23, seed=3)
    call_command("sync_index", once=True, verbosity=0)
    return comments


def shown_everywhere(count):
    """Every page's comment ids, in order, and the count pages report."""
    ids = []
    first = product_comment_page(sku=SKU, number=1)
    for number in range(1, first.paginator.num_pages + 1):
        ids += [c.pk for c in product_comment_page(sku=SKU, number=number).object_list]
    return ids, first.paginator.count


def verify_clean():
    call_command("verify_index", verbosity=0)  # raises CommandError on drift


def test_hide_takes_a_comment_off_every_page_and_unhide_puts_it_back(seeded, admin_user):
    everything = [c.pk for c in seeded]
    fast, deep = seeded[3], seeded[17]  # page 1 (GSI) and page 4 (index)
    for comment in (fast, deep):
        assert services.comment_hide(comment_id=comment.pk, actor=admin_user, reason="abuse")
    assert not services.comment_hide(comment_id=fast.pk, actor=admin_user, reason="twice")
    call_command("sync_index", once=True, verbosity=0)
    ids, count = shown_everywhere(len(seeded))
    assert ids == [pk for pk in everything if pk not in (fast.pk, deep.pk)] and count == 21
    assert get_index().count(fast.rating_group) + get_index().count(deep.rating_group) == sum(
        1 for c in seeded if c.rating_group in (fast.rating_group, deep.rating_group)) - 2
    verify_clean()
    stored = table.find_comment(deep.pk)
    assert stored.hidden and stored.sku == SKU and stored.body == deep.body

    assert services.comment_unhide(comment_id=deep.pk, actor=admin_user, reason="appeal upheld")
    call_command("sync_index", once=True, verbosity=0)
    ids, count = shown_everywhere(len(seeded))
    assert ids == [pk for pk in everything if pk != fast.pk] and count == 22  # back in its place
    verify_clean()
    assert list(AuditEntry.objects.order_by("id").values_list("action", "comment_id", "actor_name", "reason")) == [
        ("hide", fast.pk, "admin", "abuse"), ("hide", deep.pk, "admin", "abuse"),
        ("unhide", deep.pk, "admin", "appeal upheld")]


def test_delete_removes_the_item_and_its_copy_in_the_queue(seeded, admin_user):
    gone = seeded[12]
    services.report_create(comment=table.find_comment(gone.pk), reason="spam", note="buy now", client_hash="x")
    assert services.comment_delete(comment_id=gone.pk, actor=admin_user, reason="spam")
    assert dynamodb().get_item(TableName=table_name(), Key={"PK": {"S": gone.pk}, "SK": {"S": gone.sk}}).get("Item") is None
    call_command("sync_index", once=True, verbosity=0)
    ids, count = shown_everywhere(len(seeded))
    assert gone.pk not in ids and count == 22
    verify_clean()
    record = ModeratedComment.objects.get(comment_id=gone.pk)
    assert (record.state, record.author, record.body, record.open_reports) == ("deleted", "", "", 0)
    assert record.reports.get().note == ""
    assert not services.comment_delete(comment_id=gone.pk, actor=admin_user, reason="again")


def test_a_hidden_comment_that_never_had_a_rating_key_hides_and_comes_back(seeded, admin_user):
    old = seeded[0]
    dynamodb().update_item(TableName=table_name(), Key={"PK": {"S": old.pk}, "SK": {"S": old.sk}},
                           UpdateExpression="REMOVE PK2R")
    assert services.comment_hide(comment_id=old.pk, actor=admin_user, reason="x")
    assert services.comment_unhide(comment_id=old.pk, actor=admin_user, reason="x")
    item = dynamodb().get_item(TableName=table_name(), Key={"PK": {"S": old.pk}, "SK": {"S": old.sk}})["Item"]
    assert item["PK2"] == {"S": SKU} and "PK2R" not in item and not set(item) & {"hidden_PK2", "hidden_at"}


def test_hiding_a_missing_comment_is_refused(seeded, admin_user):
    with pytest.raises(services.NoSuchComment):
        services.comment_hide(comment_id="f" * 32, actor=admin_user, reason="x")
    assert not AuditEntry.objects.exists()


def test_the_audit_log_cannot_be_changed(seeded, admin_user):
    services.comment_hide(comment_id=seeded[1].pk, actor=admin_user, reason="x")
    entry = AuditEntry.objects.get()
    entry.reason = "rewritten"
    with pytest.raises(ValueError):
        entry.save()
    with pytest.raises(ValueError):
        entry.delete()
    assert AuditEntry.objects.get().reason == "x"
