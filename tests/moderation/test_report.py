"""A shopper reports a comment: the no-JavaScript form end to end on DynamoDB Local."""
import re

import pytest
from django.test import Client

from moderation.models import ModeratedComment, Report
from moderation.views import client_hashes
from tests import factories
from tests.comments.test_posting import _clean_rate_limit  # noqa: F401 (autouse: a clean count per test)

SKU = "REP-1"
PAGE = f"/products/{SKU}/"


@pytest.fixture
def comments(db, comments_table):
    factories.product(SKU, "Teapot")
    return factories.seed(SKU, 3, seed=5)


def report_url(comment, sku=SKU):
    return f"/products/{sku}/comments/{comment.pk}/report/"


@pytest.fixture
def browser():
    return Client(headers={"Origin": "http://testserver"}, REMOTE_ADDR="203.0.113.7")


def test_every_comment_links_its_report_form_out_of_crawlers_reach(comments, client):
    html = client.get(PAGE).content.decode()
    links = re.findall(r'<a class="report" href="([^"]+)" rel="nofollow">Report</a>', html)
    assert links == [report_url(c) for c in comments]
    form = client.get(links[0])
    assert form.status_code == 200
    body = form.content.decode()
    assert '<meta name="robots" content="noindex, nofollow">' in body
    assert comments[0].body.replace("<", "&lt;").replace(">", "&gt;") in body
    assert "no-store" in form["Cache-Control"]


def test_a_report_is_stored_and_thanked(comments, browser):
    response = browser.post(report_url(comments[1]), {"reason": "spam", "note": "Links to a casino"})
    assert response.status_code == 303 and response["Location"] == f"/products/{SKU}/reported/"
    thanks = browser.get(response["Location"])
    assert thanks.status_code == 200 and "Thank you for your report" in thanks.content.decode()
    report = Report.objects.get()
    assert (report.comment.comment_id, report.comment.created_sk, report.comment.sku) == (
        comments[1].pk, comments[1].sk, SKU)
    assert (report.reason, report.note, report.comment.author, report.comment.open_reports) == (
        "spam", "Links to a casino", comments[1].author, 1)
    assert report.created_at is not None
    assert "203.0.113.7" not in report.client_hash and len(report.client_hash) == 64
    other = Client(headers={"Origin": "http://testserver"}, REMOTE_ADDR="203.0.113.99")
    assert other.post(report_url(comments[1]), {"reason": "abuse"}).status_code == 303
    assert ModeratedComment.objects.get().open_reports == 2
    assert len(set(Report.objects.values_list("client_hash", flat=True))) == 2  # two clients, two hashes


def test_one_client_reporting_a_comment_again_does_not_push_it_up_the_queue(comments, browser):
    """The queue sorts by open reports: a client's repeats are thanked as usual and counted once."""
    statuses = [browser.post(report_url(comments[0]), {"reason": "spam"}).status_code for _ in range(4)]
    assert statuses == [303] * 4
    assert Report.objects.count() == 1 and ModeratedComment.objects.get().open_reports == 1
    # Once the moderator has dismissed it, the same client may report the comment again.
    Report.objects.update(dismissed=True)
    ModeratedComment.objects.update(open_reports=0)
    assert browser.post(report_url(comments[0]), {"reason": "abuse"}).status_code == 303
    assert ModeratedComment.objects.get().open_reports == 1


def test_the_client_hash_is_keyed_by_its_own_key_and_survives_a_rotation(rf, settings, comments, browser):
    request = rf.get("/", REMOTE_ADDR="198.51.100.1")
    [first] = client_hashes(request)
    settings.SECRET_KEY = "another-secret-key-for-this-test-only"
    assert client_hashes(request) == [first]  # SECRET_KEY plays no part
    old_key = settings.MODERATION_REPORTER_KEY
    settings.MODERATION_REPORTER_KEY = "another-reporter-key-for-this-test-only-0123456789"
    assert client_hashes(request)[0] != first
    # Rotated with the old key kept as a fallback: a client's open report still counts as theirs.
    assert browser.post(report_url(comments[0]), {"reason": "spam"}).status_code == 303
    settings.MODERATION_REPORTER_KEY, settings.MODERATION_REPORTER_KEY_FALLBACKS = "rotated-" + "k" * 40, [
        settings.MODERATION_REPORTER_KEY, old_key]
    assert browser.post(report_url(comments[0]), {"reason": "spam"}).status_code == 303
    assert Report.objects.count() == 1


def test_a_missing_comment_is_a_404(comments, browser):
    ghost = factories.make_comments(SKU, 1, seed=99)[0]
    assert browser.get(report_url(ghost)).status_code == 404
    assert browser.post(report_url(ghost), {"reason": "spam"}).status_code == 404
    # A real comment under another product's URL is not there either.
    factories.product("REP-2")
    assert browser.post(report_url(comments[0], sku="REP-2"), {"reason": "spam"}).status_code == 404
    assert browser.get(report_url(comments[0], sku="NO-SUCH")).status_code == 404
    assert not Report.objects.exists()


@pytest.mark.parametrize("headers", [{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {}])
def test_a_forged_cross_site_report_is_a_403(comments, headers):
    response = Client(headers=headers).post(report_url(comments[0]), {"reason": "illegal"})
    assert response.status_code == 403
    assert "We received" not in response.content.decode() and "<form" not in response.content.decode()
    assert not Report.objects.exists()


def test_an_incomplete_report_is_shown_again_with_its_error(comments, browser):
    response = browser.post(report_url(comments[0]), {"reason": "rude", "note": "x"})
    assert response.status_code == 400 and "Choose a reason." in response.content.decode()
    assert not Report.objects.exists()


def test_a_flood_of_reports_is_a_429(comments, browser, settings):
    settings.MODERATION_REPORTS_PER_MINUTE = 3
    statuses = [browser.post(report_url(comments[0]), {"reason": "spam"}).status_code for _ in range(5)]
    assert statuses == [303, 303, 303, 429, 429]
    refused = browser.post(report_url(comments[0]), {"reason": "spam"})
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert Report.objects.count() == 1  # one client's repeats count once
    other = Client(headers={"Origin": "http://testserver"}, REMOTE_ADDR="203.0.113.8")
    assert other.post(report_url(comments[0]), {"reason": "spam"}).status_code == 303  # per client


def test_a_hidden_comment_cannot_be_reported(comments, browser, admin_user):
    from moderation import services

    services.comment_hide(comment_id=comments[0].pk, actor=admin_user, reason="x")
    assert browser.get(report_url(comments[0])).status_code == 404


def test_the_report_form_answers_only_get_head_and_post(comments, browser):
    assert browser.put(report_url(comments[0])).status_code == 405


def test_a_posters_own_comment_hidden_leaves_their_pages_too(comments, browser, admin_user):
    """A poster's pages read their just-posted comment by key (the GSI may lag): once hidden, it is
    not read back for them either."""
    from moderation import services

    assert browser.post(f"{PAGE}comments/", {"author": "Ann", "rating": "2", "body": "Rude words"}).status_code == 303
    page = browser.get(PAGE)
    [posted] = [pk for pk in re.findall(r'id="comment-([0-9a-f]+)"', page.content.decode())
                if pk not in {c.pk for c in comments}]
    services.comment_hide(comment_id=posted, actor=admin_user, reason="abuse")
    again = browser.get(PAGE)
    assert again.status_code == 200 and posted not in again.content.decode()


class ModerationOnPostgres:
    """A router sending the moderation app's tables to the PostgreSQL test database."""

    def db_for_read(self, model, **hints):
        return "postgres" if model._meta.app_label == "moderation" else None

    db_for_write = db_for_read


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_comment_of_an_80_character_sku_is_reported_and_moderated_on_postgresql(comments_table, postgres_database,
                                                                                  settings):
    """M7: products allow 100-character SKUs, and so must the moderation tables (PostgreSQL enforces
    varchar lengths: a 64-character column made this report a 500, and the hide's audit entry too)."""
    from moderation import services

    settings.DATABASE_ROUTERS = [f"{__name__}.ModerationOnPostgres"]
    sku = "LONG-" + "x" * 75
    factories.product(sku, "A product with a long SKU")
    [comment] = factories.seed(sku, 1, seed=6)
    browser = Client(headers={"Origin": "http://testserver"}, REMOTE_ADDR="203.0.113.7")
    response = browser.post(report_url(comment, sku=sku), {"reason": "spam"})
    assert response.status_code == 303
    assert Report.objects.using(postgres_database).get().comment.sku == sku
    assert services.comment_hide(comment_id=comment.pk, actor=None, reason="spam")  # users stay on SQLite
    assert ModeratedComment.objects.using(postgres_database).get().state == ModeratedComment.State.HIDDEN
    from moderation.models import AuditEntry
    assert AuditEntry.objects.using(postgres_database).get().sku == sku


@pytest.mark.usefixtures("strict_dynamodb_settings")
def test_an_overlong_or_malformed_comment_id_is_a_404_that_asks_dynamodb_nothing(comments, browser, strict_endpoint,
                                                                                 caplog):
    """L3: a 5,000-character id would be a ValidationException on AWS (partition keys are at most
    2,048 bytes), which the site answered 503 with a logged traceback: the URL only takes the ids the
    shop issues, so no request reaches DynamoDB and nothing is logged but the 404."""
    strict_endpoint.clear_requests()
    for comment_id in ("a" * 5000, "a" * 2100, comments[0].pk.upper(), comments[0].pk + "0", "x%0Aforged"):
        assert browser.get(f"/products/{SKU}/comments/{comment_id}/report/").status_code == 404
        assert browser.post(f"/products/{SKU}/comments/{comment_id}/report/", {"reason": "spam"}).status_code == 404
    assert strict_endpoint.requests() == []
    assert not [r for r in caplog.records if r.levelno >= 30 and r.name != "django.request"]
