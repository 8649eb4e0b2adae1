"""The Jinja2 environment (shop/jinja2.py): its filters write what Django's filters write, byte for byte,
and the site's templates come from it while the admin keeps Django's engine."""
from decimal import Decimal

from django.contrib.humanize.templatetags import humanize
from django.template import defaultfilters, engines
from django.template.loader import get_template, render_to_string
from hypothesis import example, given
from hypothesis import strategies as st

from shop import jinja2 as site

NUMBERS = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e6, max_value=1e6),
    st.decimals(allow_nan=False, allow_infinity=False, places=2, min_value=-10**9, max_value=10**9),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(alphabet="0123456789.,-e ", max_size=12),
)


@given(NUMBERS, st.integers(min_value=-3, max_value=9))
@example(Decimal("19.99"), 2)
@example(4.25, 1)
@example(4.35, 1)
@example(2.5, 0)
@example(-0.4, 0)
@example(-0.04, 1)
@example(37.5, 0)
@example(1234567.005, 2)
def test_floatformat_is_djangos(value, places):
    assert site.floatformat(value, places) == defaultfilters.floatformat(value, places)


@given(NUMBERS.filter(lambda value: not isinstance(value, Decimal) or value.is_finite()))  # Django raises
@example(0)
@example(999)
@example(1000)
@example(-1234567)
@example("1234.50")
def test_intcomma_is_humanizes(value):
    assert site.intcomma(value) == humanize.intcomma(value)


def test_price_as_the_pages_write_it():
    """`{{ product.price|floatformat(2)|intcomma }}`, as `floatformat:2|intcomma` did."""
    for price in (Decimal("0.5"), Decimal("19.99"), Decimal("1234.5"), Decimal("1234567.899")):
        assert site.intcomma(site.floatformat(price, 2)) == humanize.intcomma(defaultfilters.floatformat(price, 2))
    assert site.intcomma(site.floatformat(Decimal("1234567.899"), 2)) == "1,234,567.90"


@given(st.one_of(st.integers(), st.floats(), st.text(max_size=3), st.lists(st.none(), max_size=3), st.none()),
       st.sampled_from(["s", "es", "y,ies", ",s"]))
@example(1, "s")
@example(1.0, "s")
@example(0, "s")
def test_pluralize_is_djangos(value, suffix):
    assert site.pluralize(value, suffix) == defaultfilters.pluralize(value, suffix)


def test_site_templates_are_jinja2_and_the_admins_django():
    assert isinstance(get_template("comments/product_detail.html"), type(engines["jinja2"].get_template("base.html")))
    assert get_template("admin/index.html").backend is engines["django"]
    assert get_template("robots.txt").backend is engines["django"]


def test_autoescape_is_on_and_django_safe_strings_pass():
    from django.utils.safestring import mark_safe

    template = engines["jinja2"].from_string("{{ text }} {{ html }}")
    assert template.render({"text": "<b>&</b>", "html": mark_safe("<i>ok</i>")}) == "&lt;b&gt;&amp;&lt;/b&gt; <i>ok</i>"


def test_url_and_static():
    template = engines["jinja2"].from_string("{{ url('catalogue') }} {{ url('comment-post', sku='A-1') }} "
                                             "{{ static('css/shop.css') }}")
    assert template.render({}) == "/ /products/A-1/comments/ /static/css/shop.css"


def test_every_render_is_reported(rf, rendered_templates):
    html = render_to_string("404.html", request=rf.get("/nowhere"))
    assert "Page not found" in html and 'class="site-header"' in html
    assert rendered_templates == ["404.html"]  # its base and includes are parts of the one render


def test_flash_messages_show_once(client, db):
    """The messages context processor runs for Jinja2 too: a message shows on the next page, once."""
    from django.contrib.messages import constants
    from django.contrib.messages.storage.cookie import CookieStorage
    from django.http import HttpResponse
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    storage = CookieStorage(request)
    storage.add(constants.SUCCESS, "Saved <b>it</b>")
    response = HttpResponse()
    storage.update(response)
    client.cookies[CookieStorage.cookie_name] = response.cookies[CookieStorage.cookie_name].value
    html = client.get("/").content.decode()
    assert '<p class="message message-success">Saved &lt;b&gt;it&lt;/b&gt;</p>' in html
    assert "Saved" not in client.get("/").content.decode()
