"""The product page in a real browser: Debian's Chromium driven by Playwright, against a live server
on DynamoDB Local. Screenshots go to test-artifacts/screenshots/ (git-ignored)."""
import os
import re
from pathlib import Path

import pytest
from django.core.management import call_command

from tests import factories
from tests.comments.test_star_contrast import contrast
from tests.conftest import service_missing

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
SKU = "TEAPOT-1"
TOTAL = 230  # 12 pages: 1..10 from the fast path, 11 and 12 through the index
PHONE = {"width": 390, "height": 844}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sync_playwright():
    if not (os.path.exists(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        service_missing(f"Chromium is not installed at {CHROMIUM} (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        service_missing(f"the playwright package is missing ({exc}): make setup-dev installs it")
    return sync_playwright


@pytest.fixture
def shop(transactional_db, comments_table, live_server, settings):
    settings.COMMENTS_POSTS_PER_MINUTE = 100
    product = factories.product(SKU, "Cast-iron teapot")
    factories.product("MUG-1", "Stoneware mug")
    comments = factories.seed(SKU, TOTAL, seed=7)
    factories.seed("MUG-1", 3, seed=8)
    call_command("rebuild_index", verbosity=0)
    return product, comments


def shot(page, name):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def first_comment_ids(page, n=None):
    ids = page.locator("article.comment").evaluate_all("els => els.map(e => e.id.slice('comment-'.length))")
    return ids if n is None else ids[:n]


def rgb(css_colour: str) -> tuple[int, int, int]:
    match = re.fullmatch(r"rgba?\((\d+), (\d+), (\d+)(?:, ([\d.]+))?\)", css_colour)
    assert match and match.group(4) in (None, "1"), f"not an opaque colour: {css_colour}"
    return tuple(int(match.group(i)) for i in (1, 2, 3))


def check_star_picker_by_keyboard(page, product_url):
    """Tab to the rating, pick three stars with the arrow keys: Chromium's computed styles show the
    focus ring and lit and unlit stars with 3:1 against the form (WCAG 1.4.11), on a 390 px phone."""
    page.goto(product_url)
    page.get_by_label("Your name").focus()
    page.keyboard.press("Tab")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert page.get_by_label("3 stars").is_checked()
    assert page.evaluate("document.activeElement.id") == page.get_by_label("3 stars").get_attribute("id")
    page.locator("#write-comment").screenshot(path=str(SCREENSHOTS / "09-star-picker-focus-390px.png"))
    styles = page.locator(".star-picker label").evaluate_all("""labels => labels.map(label => {
        const style = getComputedStyle(label);
        return {fill: style.color, outline: style.webkitTextStrokeColor, strokeWidth: style.webkitTextStrokeWidth,
                focusStyle: style.outlineStyle, focusWidth: style.outlineWidth, focusColour: style.outlineColor};
    })""")
    background = rgb(page.locator(".comment-form").evaluate("form => getComputedStyle(form).backgroundColor"))
    lit, unlit = styles[:3], styles[3:]
    assert len({(s["fill"], s["outline"]) for s in lit}) == 1 and len({(s["fill"], s["outline"]) for s in unlit}) == 1
    assert lit[0]["fill"] != unlit[0]["fill"] and lit[0]["outline"] != unlit[0]["outline"]
    assert lit[0]["fill"] == lit[0]["outline"]  # filled, where an unlit star is an outline
    assert contrast(rgb(lit[0]["fill"]), background) >= 3
    assert contrast(rgb(unlit[0]["outline"]), background) >= 3 and unlit[0]["strokeWidth"] == "2px"
    focused, others = styles[2], styles[:2] + styles[3:]
    assert focused["focusStyle"] == "solid" and focused["focusWidth"] == "3px"
    assert contrast(rgb(focused["focusColour"]), background) >= 3
    assert all(style["focusStyle"] == "none" for style in others)


def test_browse_pages_and_post_comments(sync_playwright, shop, live_server):
    product, comments = shop
    product_url = live_server.url + product.get_absolute_url()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})

            page.goto(live_server.url + "/")
            assert page.get_by_role("heading", level=1).inner_text() == "Products"
            assert "230" in page.get_by_role("row", name="Cast-iron teapot").inner_text()
            shot(page, "01-catalogue")
            page.get_by_role("link", name="Cast-iron teapot").click()
            page.wait_for_url(product_url)
            assert page.locator(".page-status").inner_text() == "page 1 of 12"
            assert first_comment_ids(page) == [c.pk for c in comments[:20]]
            shot(page, "02-product-page-1")

            pager = page.get_by_role("navigation", name="Comment pages")
            pager.get_by_role("link", name="2", exact=True).click()
            page.wait_for_url(product_url + "?page=2")
            assert page.locator(".page-status").inner_text() == "page 2 of 12"
            assert first_comment_ids(page) == [c.pk for c in comments[20:40]]

            pager.get_by_role("link", name="12", exact=True).click()
            page.wait_for_url(product_url + "?page=12")
            assert page.locator(".page-status").inner_text() == "page 12 of 12"
            assert first_comment_ids(page) == [c.pk for c in comments[220:]]
            shot(page, "03-product-last-page")

            pager.get_by_role("link", name="1", exact=True).click()
            page.wait_for_url(product_url)
            assert page.locator(".page-status").inner_text() == "page 1 of 12"

            page.get_by_label("Your name").fill("Zoë 山田")
            page.locator(".star-picker label").nth(3).click()  # the fourth star, as a person would
            assert page.get_by_label("4 stars").is_checked()
            page.get_by_label("Your comment").fill("Pours well, no drips 🫖\nThe lid <b>rattles</b> a bit.")
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.locator("#write-comment").screenshot(path=str(SCREENSHOTS / "04-filled-form.png"))
            with page.expect_response(lambda r: r.request.method == "POST") as posted:
                page.get_by_role("button", name="Post comment").click()
            assert posted.value.status == 303
            page.wait_for_url(product_url)
            assert "Thank you! Your comment is posted." in page.get_by_role("status").inner_text()
            first = page.locator("article.comment").first
            assert first.locator(".author").inner_text() == "Zoë 山田"
            assert first.locator(".stars").get_attribute("aria-label") == "Rated 4 out of 5"
            assert first.locator(".body").inner_text() == "Pours well, no drips 🫖\nThe lid <b>rattles</b> a bit."
            assert first.locator("time").get_attribute("datetime").endswith("Z")
            assert first_comment_ids(page, 3)[1:] == [c.pk for c in comments[:2]]
            assert page.locator(".page-status").inner_text() == "page 1 of 12"
            shot(page, "05-after-posting")

            with page.expect_response(lambda r: r.request.method == "POST") as posted:
                page.get_by_role("button", name="Post comment").click()
            assert posted.value.status == 400
            alert = page.get_by_role("alert")
            assert "Enter your name." in alert.inner_text() and "Write your comment." in alert.inner_text()
            assert page.get_by_label("Your name").get_attribute("aria-invalid") == "true"
            shot(page, "06-empty-comment-errors")

            phone = browser.new_page(viewport=PHONE)
            phone.goto(product_url)
            assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
            shot(phone, "07-product-page-390px")
            phone.get_by_role("button", name="Post comment").click()
            phone.wait_for_load_state()
            assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
            shot(phone, "08-errors-390px")

            check_star_picker_by_keyboard(browser.new_page(viewport=PHONE), product_url)
        finally:
            browser.close()
