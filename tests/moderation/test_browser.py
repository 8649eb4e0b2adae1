"""Moderation in a real browser (Debian's Chromium driven by Playwright) through nginx in front of a live
server on DynamoDB Local: a shopper reports a comment; a moderator logs in, finds it in the queue and
hides it, and it is gone from the product's pages through nginx; a shopper never gets the screen."""
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from moderation.models import AuditEntry, Report
from stack.nginx import Nginx, NginxError, nginx_binary
from tests import factories
from tests.comments.test_browser import CHROMIUM, CHROMIUM_ARGS, first_comment_ids, shot, sync_playwright  # noqa: F401
from tests.conftest import service_missing
from tests.moderation.test_gone_everywhere import DEADLINE, crawl, shown
from tests.config import set_cache_seconds, set_pages

SKU = "GONE-1"  # crawl() walks this product's pages
QUEUE = "/admin/moderation/moderatedcomment/"

pytestmark = pytest.mark.slow


@pytest.fixture
def site(transactional_db, comments_table, live_server, settings, tmp_path, moderators):
    if not nginx_binary():
        service_missing("nginx is not installed (Debian: apt-get install nginx)")
    set_cache_seconds(settings, 2)
    set_pages(settings, 5, 2)
    product = factories.product(SKU, "Enamel jug")
    comments = factories.seed(SKU, 14, seed=12)
    call_command("rebuild_index", verbosity=0)
    moderator = User.objects.create_user("mia", password="mia-pass-4821", is_staff=True)
    moderator.groups.add(moderators)
    User.objects.create_user("sam", password="sam-pass-4821")  # a shopper with an account
    static_root = tmp_path / "static"
    settings.STATIC_ROOT = static_root
    call_command("collectstatic", interactive=False, verbosity=0)
    try:
        with Nginx(tmp_path / "nginx", upstream=urlsplit(live_server.url).netloc, static_root=static_root) as nginx:
            yield nginx, product, comments
    except NginxError as exc:
        pytest.fail(str(exc))


def off_the_loop(function, *args, **kwargs):
    """Run a database call outside Playwright's event loop (Django refuses one inside it)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(function, *args, **kwargs).result()


def test_report_then_hide_through_the_staff_screen(sync_playwright, site):  # noqa: F811
    nginx, product, comments = site
    base = f"http://127.0.0.1:{nginx.port}"
    target = comments[3]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            shopper = browser.new_page()
            shopper.goto(base + product.get_absolute_url())
            assert target.pk in first_comment_ids(shopper)
            report = shopper.locator(f"#comment-{target.pk} a.report")
            assert report.get_attribute("rel") == "nofollow"
            report.click()
            shopper.get_by_label("Abusive or hateful").check()
            shopper.get_by_label("Anything we should know (optional)").fill("Insults another shopper.")
            shot(shopper, "moderation-01-report-form")
            shopper.get_by_role("button", name="Send report").click()
            shopper.wait_for_url(f"{base}/products/{SKU}/reported/")
            assert shopper.get_by_role("heading", level=1).inner_text() == "Thank you for your report"
            assert off_the_loop(lambda: Report.objects.get().comment.comment_id) == target.pk

            # A shopper, signed in or not, gets the login page, never the screen.
            shopper.goto(base + QUEUE)
            assert "/admin/login/" in shopper.url
            shopper.get_by_label("Username").fill("sam")
            shopper.get_by_label("Password").fill("sam-pass-4821")
            shopper.get_by_role("button", name="Log in").click()
            assert "/admin/login/" in shopper.url and "staff account" in shopper.content()
            assert "Moderated comments" not in shopper.content()

            staff = browser.new_context().new_page()
            staff.goto(base + QUEUE)
            staff.get_by_label("Username").fill("mia")
            staff.get_by_label("Password").fill("mia-pass-4821")
            staff.get_by_role("button", name="Log in").click()
            staff.wait_for_url(base + QUEUE)
            staff.locator("#searchbar").fill(target.author)
            staff.locator("#changelist-search").get_by_role("button").click()
            row = staff.locator("#result_list tbody tr")
            from playwright.sync_api import expect  # installed: the sync_playwright fixture checked

            expect(row).to_have_count(1)  # waits for the search's page; count() alone would not
            assert target.author in row.inner_text()
            row.locator("input.action-select").check()
            staff.locator("select[name=action]").select_option(label="Hide from every page")
            staff.locator("input[name=reason]").fill("Insults: rule 2")
            shot(staff, "moderation-02-queue")
            staff.get_by_role("button", name="Go", exact=True).click()
            assert "1 comment(s) hidden." in staff.locator("ul.messagelist").inner_text()
            assert off_the_loop(lambda: AuditEntry.objects.get().actor_name) == "mia"

            # Gone from every page through nginx, the way the shopper sees it too.
            started = time.monotonic()
            while target.pk in shown(crawl(nginx)):
                off_the_loop(call_command, "sync_index", once=True, verbosity=0)
                assert time.monotonic() - started < DEADLINE
                time.sleep(0.5)
            # A new visitor; the shopper's own browser may keep its copy for the page's max-age
            # (COMMENTS_PAGE_MAX_AGE, 60 s) unless reloaded, which revalidates: the ETag changed.
            visitor = browser.new_context().new_page()
            visitor.goto(base + product.get_absolute_url())
            assert target.pk not in first_comment_ids(visitor)
            shopper.goto(base + product.get_absolute_url())
            shopper.reload()
            assert target.pk not in first_comment_ids(shopper)
            shot(shopper, "moderation-03-gone")
        finally:
            browser.close()
