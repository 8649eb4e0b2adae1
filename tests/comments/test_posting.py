"""Posting comments through the form: the POST view end to end on DynamoDB Local."""
import re
import time

import pytest
from django.core.cache import cache, caches
from django.core.cache.backends.locmem import LocMemCache
from django.test import Client, override_settings

from comments.forms import BODY_MAX
from comments.store import comment_from_item, parse_sk
from comments.table.client import dynamodb
from comments.table.keys import table_name
from stack.dynamodb_local import free_port
from tests import factories
from tests.config import aws_settings, put_shared_window, set_cache_seconds, shared_window

SKU = "POST-1"
URL = f"/products/{SKU}/"
POST_URL = f"/products/{SKU}/comments/"
VALID = {"author": "Ann", "rating": "4", "body": "Very good kettle."}


@pytest.fixture
def client():
    """A browser posting from the site's own page: browsers send Origin on every form POST."""
    return Client(headers={"Origin": "http://testserver"})


@pytest.fixture
def product(db, comments_table):
    return factories.product(SKU, "Kettle")


def _clear_local_cache():
    """A clean post count per test. Only ever LocMemCache: on django-redis, clear() is a FLUSHDB of
    a server other tests and developers share (redis_cache gives each test its own key prefix)."""
    if isinstance(caches["default"], LocMemCache):
        caches["default"].clear()


@pytest.fixture(autouse=True)
def _clean_rate_limit():
    _clear_local_cache()
    yield
    _clear_local_cache()


def stored():
    items = dynamodb().scan(TableName=table_name(), ConsistentRead=True)["Items"]
    return sorted(map(comment_from_item, items), key=lambda c: c.order_key, reverse=True)


def comment_ids(html: str) -> list[str]:
    return re.findall(r'id="comment-([0-9a-f]+)"', html)


def test_product_page_has_the_form(client, product):
    html = client.get(URL).content.decode()
    assert f'action="{POST_URL}"' in html
    assert "csrfmiddlewaretoken" not in html  # no per-visitor token: the page is public
    for field, label in [("author", "Your name"), ("body", "Your comment")]:
        assert f'<label for="id_{field}">{label}</label>' in html
    assert "<legend>Rating</legend>" in html and html.count('type="radio" name="rating"') == 5  # besides the filter's checkboxes
    assert re.search(r'<div class="hp" aria-hidden="true">.*?name="website"[^>]*tabindex="-1"', html, re.S)


def test_valid_post_is_a_303_to_page_one_with_the_comment_first(client, product):
    older = factories.seed(SKU, 45, seed=1)
    before = time.time()
    response = client.post(POST_URL, VALID)
    assert response.status_code == 303
    assert response["Location"] == URL
    [new] = [c for c in stored() if c.pk not in {o.pk for o in older}]
    assert re.fullmatch(r"[0-9a-f]{32}", new.pk)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", new.sk)
    assert before - 1 <= parse_sk(new.sk).timestamp() <= time.time() + 1
    assert (new.sku, new.author, new.rating, new.body) == (SKU, "Ann", 4, "Very good kettle.")

    page = client.get(URL)
    html = page.content.decode()
    assert comment_ids(html)[0] == new.pk
    assert comment_ids(html)[1:] == [c.pk for c in older[:19]]
    assert "Thank you! Your comment is posted." in html
    assert "page 1 of 3" in html
    assert "Thank you!" not in client.get(URL).content.decode()  # the message is shown once


def test_new_comment_is_first_even_when_the_window_is_stale(client, product, settings):
    """The GSI (or another process's cached window) may not have the new comment yet: the poster's
    page 1 reads it by key. Here the cached window is put back to what it was before the post."""
    set_cache_seconds(settings, 60)
    older = factories.seed(SKU, 30, seed=2)
    client.get(URL)
    stale = shared_window(SKU)
    assert [item["PK"]["S"] for item in stale.items] == [c.pk for c in older]

    assert client.post(POST_URL, VALID).status_code == 303
    put_shared_window(SKU, stale)  # as another process that read the GSI before the post
    [new] = [c for c in stored() if c.pk not in {o.pk for o in older}]

    html = client.get(URL).content.decode()
    assert comment_ids(html)[:3] == [new.pk, older[0].pk, older[1].pk]
    assert "page 1 of 2" in html and "(31)" in html
    assert shared_window(SKU) == stale  # it really was served stale
    # Someone else still sees the stale window: the comment came from this visitor's pin.
    assert new.pk not in comment_ids(Client().get(URL).content.decode())
    # Page 2 of the poster's view is shifted by the pinned comment, so nothing is shown twice.
    page2 = comment_ids(client.get(URL + "?page=2").content.decode())
    assert page2 == [c.pk for c in older[19:]]


def test_pins_expire_and_are_per_product(client, product, settings):
    from comments import recent

    session = client.session
    session[recent.SESSION_KEY] = [[SKU, "a" * 32, "2020-01-01T00:00:00.000000Z"],
                                   ["OTHER", "b" * 32, "2999-01-01T00:00:00.000000Z"]]
    session.save()
    client.get(URL)
    assert client.session[recent.SESSION_KEY] == [["OTHER", "b" * 32, "2999-01-01T00:00:00.000000Z"]]


def test_empty_form_is_shown_again_with_errors(client, product):
    response = client.post(POST_URL, {"author": "", "rating": "", "body": ""})
    assert response.status_code == 400
    html = response.content.decode()
    assert 'class="error-summary" role="alert"' in html
    for message in ["Enter your name.", "Choose a rating from 1 to 5 stars.", "Write your comment."]:
        assert message in html
    assert 'aria-invalid="true"' in html and 'aria-describedby="id_author_error"' in html
    assert stored() == []


def test_invalid_form_keeps_what_was_typed(client, product):
    response = client.post(POST_URL, {"author": "Zoë <b>", "rating": "5", "body": ""})
    assert response.status_code == 400
    html = response.content.decode()
    assert 'value="Zoë &lt;b&gt;"' in html
    assert re.search(r'value="5"[^>]*checked', html)
    assert "Write your comment." in html and "Enter your name." not in html


@pytest.mark.parametrize("data, error", [
    ({"body": "x" * (BODY_MAX + 1)}, "Ensure this value has at most 5000 characters (it has 5001)."),
    ({"author": "n" * 81}, "Ensure this value has at most 80 characters (it has 81)."),
    ({"rating": "6"}, "Choose a rating from 1 to 5 stars."),
    ({"rating": "4.5"}, "Choose a rating from 1 to 5 stars."),
    ({"body": " \n\t\x00 "}, "Write your comment."),
    ({"author": "\x07\x1b"}, "Enter your name."),
])
def test_bad_values_are_400(client, product, data, error):
    response = client.post(POST_URL, {**VALID, **data})
    assert response.status_code == 400
    assert error in response.content.decode()
    assert stored() == []


def test_longest_comment_and_name_are_accepted(client, product):
    body = "é" * (BODY_MAX - 1) + "🫖"
    assert client.post(POST_URL, {**VALID, "author": "n" * 80, "body": body}).status_code == 303
    assert stored()[0].body == body


def test_unknown_product_is_404(client, db, comments_table):
    assert client.post("/products/NO-SUCH/comments/", VALID).status_code == 404


def test_get_on_the_post_url_goes_to_the_product(client, product):
    response = client.get(POST_URL)
    assert response.status_code == 302 and response["Location"] == URL


def test_oversized_request_body_is_a_413_page(client, product, settings):
    data = {**VALID, "body": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)}
    response = client.post(POST_URL, data)
    assert response.status_code == 413
    assert "That was too much to send" in response.content.decode()
    assert stored() == []


def test_control_characters_are_stripped_and_newlines_and_tabs_kept(client, product):
    body = "line one\x00\x07\r\nline\ttwo\x1b[31m\u0085\rthree\x7f"
    assert client.post(POST_URL, {**VALID, "author": "Ann\x00\n\tLee\x08", "body": body}).status_code == 303
    [comment] = stored()
    assert comment.body == "line one\nline\ttwo[31m\nthree"
    assert comment.author == "Ann Lee"


def test_html_is_shown_escaped(client, product):
    client.post(POST_URL, {**VALID, "author": "<i>Mallory</i>", "body": '<script>alert("x")</script> & <b>'})
    html = client.get(URL).content.decode()
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &lt;b&gt;" in html
    assert "&lt;i&gt;Mallory&lt;/i&gt;" in html
    assert "<script>alert" not in html


def test_unicode_round_trips_exactly(client, product):
    author = "Zoë Ångström 山田太郎 🫖"
    body = "Crème brûlée, 茶と急須, Ελληνικά, עברית, 👨‍👩‍👧‍👦 🇯🇵 ✓\nSecond line\twith a tab"
    assert client.post(POST_URL, {**VALID, "author": author, "body": body}).status_code == 303
    [comment] = stored()
    assert (comment.author, comment.body) == (author, body)
    html = client.get(URL).content.decode()
    assert author in html and body in html


def test_dynamodb_down_is_a_503_that_keeps_the_form(client, product, settings):
    closed = free_port()  # free a moment ago: nothing listens there
    with aws_settings(ENDPOINT_URL=f"http://127.0.0.1:{closed}"):
        response = client.post(POST_URL, {**VALID, "author": "Zoë", "body": "Keep <this> text\nplease"})
    assert response.status_code == 503
    assert response["Retry-After"]
    html = response.content.decode()
    assert "We couldn&#39;t save your comment" in html
    assert 'value="Zoë"' in html and "Keep &lt;this&gt; text\nplease</textarea>" in html
    assert re.search(r'value="4"[^>]*checked', html)
    assert stored() == []


def test_honeypot_pretends_success_and_writes_nothing(client, product):
    response = client.post(POST_URL, {**VALID, "website": "http://spam.example"})
    assert response.status_code == 303 and response["Location"] == URL
    assert "Thank you! Your comment is posted." in client.get(URL).content.decode()
    assert stored() == []


def wait_for_fresh_minute():
    """The limit counts per clock minute: don't start a burst in the last seconds of one."""
    if time.time() % 60 > 52:
        time.sleep(60 - time.time() % 60 + 0.1)


def post_burst(client, n, **extra):
    return [client.post(POST_URL, {**VALID, "body": f"Comment {i}"}, **extra).status_code for i in range(n)]


@pytest.fixture(params=["locmem", "redis"])
def rate_cache(request):
    if request.param == "redis":
        return request.getfixturevalue("redis_cache")
    return cache


def test_rate_limit_then_429_with_the_comment_kept(client, product, settings, rate_cache):
    settings.COMMENTS_POSTS_PER_MINUTE = 3
    wait_for_fresh_minute()
    assert post_burst(client, 3) == [303, 303, 303]
    response = client.post(POST_URL, {**VALID, "body": "One too many"})
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60
    html = response.content.decode()
    assert "Please wait a moment" in html and "up to 3 comments a minute" in html
    assert "One too many</textarea>" in html and 'value="Ann"' in html
    assert len(stored()) == 3
    # Another client has its own count.
    assert post_burst(client, 1, REMOTE_ADDR="192.0.2.7") == [303]
    assert len(stored()) == 4


def test_rate_limit_counts_the_client_behind_a_trusted_proxy(client, product, settings):
    settings.COMMENTS_POSTS_PER_MINUTE = 1
    settings.COMMENTS_CLIENT_IP_HEADER = "X-Forwarded-For"
    wait_for_fresh_minute()
    first = {"HTTP_X_FORWARDED_FOR": "203.0.113.9, 198.51.100.1"}
    spoofed = {"HTTP_X_FORWARDED_FOR": "203.0.113.10, 198.51.100.1"}  # only the rightmost counts
    other = {"HTTP_X_FORWARDED_FOR": "198.51.100.2"}
    assert post_burst(client, 1, **first) == [303]
    assert post_burst(client, 1, **spoofed) == [429]
    assert post_burst(client, 1, **other) == [303]


def test_ipv6_clients_are_counted_per_64(client, product, settings):
    settings.COMMENTS_POSTS_PER_MINUTE = 1
    wait_for_fresh_minute()
    assert post_burst(client, 1, REMOTE_ADDR="2001:db8:1:2::1") == [303]
    assert post_burst(client, 1, REMOTE_ADDR="2001:db8:1:2:ffff::9") == [429]
    assert post_burst(client, 1, REMOTE_ADDR="2001:db8:1:3::1") == [303]


def test_honeypot_posts_count_against_the_limit(client, product, settings):
    settings.COMMENTS_POSTS_PER_MINUTE = 1
    wait_for_fresh_minute()
    assert client.post(POST_URL, {**VALID, "website": "x"}).status_code == 303
    assert client.post(POST_URL, VALID).status_code == 429


def test_invalid_posts_do_not_use_up_the_posting_limit(client, product, settings):
    """A person correcting mistakes: six posts refused as invalid, then the right one is accepted."""
    assert settings.COMMENTS_POSTS_PER_MINUTE == 5  # the default
    wait_for_fresh_minute()
    invalid = [client.post(POST_URL, {**VALID, "body": ""}).status_code for _ in range(6)]
    assert invalid == [400] * 6
    assert client.post(POST_URL, VALID).status_code == 303
    assert len(stored()) == 1
    assert post_burst(client, 4) == [303] * 4  # the posting limit is whole: five accepted in all
    assert post_burst(client, 1) == [429]


def test_invalid_posts_have_a_generous_limit_of_their_own(client, product, settings):
    settings.COMMENTS_INVALID_POSTS_PER_MINUTE = 3
    wait_for_fresh_minute()
    assert [client.post(POST_URL, {**VALID, "body": ""}).status_code for _ in range(3)] == [400] * 3
    response = client.post(POST_URL, {**VALID, "body": "", "author": "Still Ann"})
    assert response.status_code == 429 and 1 <= int(response["Retry-After"]) <= 60
    html = response.content.decode()
    assert "more than 3 incomplete forms" in html
    assert "Write your comment." in html and 'value="Still Ann"' in html  # errors and what was typed, kept
    assert client.post(POST_URL, VALID).status_code == 303  # a valid post is still accepted
