"""Erasure requests: the erase_comments command and the staff form, on DynamoDB Local."""
import dataclasses

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from comments.store import put_comments
from moderation import services, table
from moderation.models import AuditEntry, ModeratedComment
from tests import factories

SKU = "ERA-1"
OTHER = "ERA-2"


@pytest.fixture
def comments(db, comments_table):
    """Ann wrote 3 comments on SKU (one of them hidden) and 1 on OTHER; others wrote the rest."""
    factories.product(SKU)
    factories.product(OTHER)
    mine = factories.make_comments(SKU, 8, seed=1)
    for i in (1, 4, 6):
        mine[i] = dataclasses.replace(mine[i], author="Ann")
    theirs = factories.make_comments(OTHER, 2, seed=2)
    theirs[0] = dataclasses.replace(theirs[0], author="Ann")
    put_comments(mine + theirs)
    services.comment_hide(comment_id=mine[4].pk, actor=None, reason="abuse")
    return mine, theirs



def test_dry_run_lists_and_changes_nothing(comments, capsys):
    mine, _ = comments
    call_command("erase_comments", product=SKU, author="Ann", dry_run=True, verbosity=2)
    out, err = capsys.readouterr()
    assert "3 comment(s) on 1 product(s) would be erased (dry run: nothing changed)" in out
    assert {line.split()[0] for line in err.splitlines() if line.strip()} >= {mine[i].pk for i in (1, 4, 6)}
    assert all(table.find_comment(mine[i].pk) for i in (1, 4, 6))
    assert not AuditEntry.objects.filter(action="erase").exists()


def test_erase_by_author_on_a_product_deletes_shown_and_hidden(comments, capsys):
    mine, theirs = comments
    call_command("erase_comments", product=SKU, author="Ann", reason="GDPR request 17")
    assert "3 comment(s) erased on 1 product(s): ERA-1" in capsys.readouterr().out
    assert [table.find_comment(c.pk) is None for c in mine] == [i in (1, 4, 6) for i in range(8)]
    assert table.find_comment(theirs[0].pk) is not None  # Ann on another product: not named
    assert sorted(AuditEntry.objects.filter(action="erase").values_list("comment_id", flat=True)) == sorted(
        mine[i].pk for i in (1, 4, 6))
    assert ModeratedComment.objects.get(comment_id=mine[4].pk).body == ""  # the queue's copy too


def test_erase_by_ids(comments, tmp_path, capsys):
    mine, theirs = comments
    ids = tmp_path / "ids.txt"
    ids.write_text(f"{theirs[1].pk}\n\n{'f' * 32}\n")
    call_command("erase_comments", ids=[mine[0].pk], ids_file=str(ids))
    out, err = capsys.readouterr()
    assert "2 comment(s) erased on 2 product(s)" in out and f"no comment {'f' * 32}" in err
    assert table.find_comment(mine[0].pk) is None and table.find_comment(theirs[1].pk) is None


def test_no_match_says_so_and_changes_nothing(comments):
    with pytest.raises(CommandError, match="No comment matches: nothing was changed"):
        call_command("erase_comments", product=SKU, author="Nobody")
    with pytest.raises(CommandError, match="No comment matches"):
        call_command("erase_comments", ids=["0" * 32])
    with pytest.raises(CommandError, match="--author needs --product"):
        call_command("erase_comments", author="Ann")
    assert not AuditEntry.objects.filter(action="erase").exists()


def test_the_staff_form_previews_then_erases(comments, moderators):
    mine, _ = comments
    user = User.objects.create_user("mia", password="x", is_staff=True)
    user.groups.add(moderators)
    client = Client()
    client.force_login(user)
    url = "/admin/moderation/moderatedcomment/erase/"
    assert "Erase comments" in client.get("/admin/moderation/moderatedcomment/").content.decode()
    data = {"sku": SKU, "author": "Ann", "ids": "", "reason": "request 9"}
    preview = client.post(url, {**data, "preview": "1"})
    assert preview.status_code == 200 and preview.context["erasure"].found
    assert all(table.find_comment(mine[i].pk) for i in (1, 4, 6))
    done = client.post(url, {**data, "erase": "1"}, follow=True)
    assert "3 comment(s) erased." in done.content.decode()
    assert all(table.find_comment(mine[i].pk) is None for i in (1, 4, 6))
    nothing = client.post(url, {**data, "preview": "1"})
    assert "No comment matches: nothing was changed." in nothing.content.decode()
    other = Client()
    other.force_login(User.objects.create_user("vic", password="x", is_staff=True))
    assert other.get(url).status_code == 403


def test_the_staff_form_refuses_a_product_too_large_to_read_in_one_request(comments, moderators, settings):
    """An erasure by author reads the product's whole partition: past MODERATION_ERASE_WEB_READ_LIMIT
    comments the form reads no further, changes nothing and names the command that has no limit."""
    mine, _ = comments
    settings.MODERATION_ERASE_WEB_READ_LIMIT = 3  # the product has 7 shown comments
    user = User.objects.create_user("mia", password="x", is_staff=True)
    user.groups.add(moderators)
    client = Client()
    client.force_login(user)
    url = "/admin/moderation/moderatedcomment/erase/"
    answer = client.post(url, {"sku": SKU, "author": "Ann", "ids": "", "reason": "request 9", "erase": "1"}, follow=True)
    assert answer.status_code == 200
    text = answer.content.decode()
    assert f"{SKU} has more than 3 comments" in text and "manage.py erase_comments --product" in text
    assert all(table.find_comment(mine[i].pk) for i in (1, 4, 6))
    assert not AuditEntry.objects.filter(action="erase").exists()
    settings.MODERATION_ERASE_WEB_READ_LIMIT = 7  # exactly as many as it holds: read and erased
    done = client.post(url, {"sku": SKU, "author": "Ann", "ids": "", "reason": "request 9", "erase": "1"}, follow=True)
    assert "3 comment(s) erased." in done.content.decode()
