"""What a search engine sees: a crawler from / that follows only <a href> links, within robots.txt."""
import hashlib
import re
from urllib.robotparser import RobotFileParser

import pytest
from django.core.management import call_command

from tests import factories
from tests.crawler import crawl, parse_robots, path_and_query, robots_allows
from tests.pages import json_ld

# One product deep enough that pages past COMMENTS_FAST_PAGES (10) come from the index, a few
# short ones, one without comments; a run of equal SKs across the fast/index seam.
PRODUCTS = {"CRAWL-BIG": 610, "CRAWL-MID": 45, "CRAWL-ONE": 1, "CRAWL-NONE": 0}


@pytest.fixture(scope="module")
def crawl_comments(module_table):
    return {sku: factories.seed(sku, count, seed=len(sku), ties=[(195, 205)] if count > 205 else [])
            for sku, count in PRODUCTS.items() if count}


@pytest.fixture
def crawl_site(db, crawl_comments):
    for sku in PRODUCTS:
        factories.product(sku, f"Crawled {sku.lower()}")
    call_command("rebuild_index", group=list(crawl_comments), verbosity=0)
    return crawl_comments


def main_content(html: str) -> str:
    """The page minus its own URLs (canonical, prev/next), to compare what two URLs show."""
    return hashlib.sha256(re.sub(r"<link [^>]*>", "", html).encode()).hexdigest()


def test_crawler_reaches_every_comment_once_within_robots(client, crawl_site):
    robots = client.get("/robots.txt")
    assert robots.status_code == 200 and robots["Content-Type"].startswith("text/plain")
    rules, sitemaps = parse_robots(robots.content.decode())
    assert sitemaps == ["http://testserver/sitemap.xml"]

    results = crawl(client)

    broken = {url: r["status"] for url, r in results.items() if r["status"] != 200}
    assert broken == {}
    disallowed = {link for r in results.values() for link in r["links"]
                  if link.startswith("http://testserver/") and not robots_allows(rules, path_and_query(link))}
    assert disallowed == set()
    # The one kind of link left out: each comment's report link, rel="nofollow" and disallowed by robots.txt.
    report_links = re.findall(r'<a class="report" href="([^"]+)" rel="nofollow">', results[
        "http://testserver/products/CRAWL-ONE/"]["html"])
    assert len(report_links) == 1 and not robots_allows(rules, report_links[0])

    for url, r in results.items():
        assert r["page"]["canonical"] == url, url
    product_pages = {url: r for url, r in results.items() if "/products/" in url}
    fingerprints = [main_content(r["html"]) for r in results.values()]
    assert len(set(fingerprints)) == len(fingerprints)

    for sku, comments in crawl_site.items():
        pages = [r for url, r in product_pages.items() if f"/products/{sku}/" in url]
        assert len(pages) == -(-len(comments) // 20)
        shown = [pk for r in pages for pk, _ in r["page"]["comments"]]
        assert sorted(shown) == sorted(c.pk for c in comments), sku  # every comment, exactly once
        for r in pages:  # the JSON-LD reviews are the comments the page shows
            reviews = json_ld(r["html"]).get("review", [])
            assert [review["@id"].rsplit("#comment-", 1)[1] for review in reviews] == [pk for pk, _ in r["page"]["comments"]]
    assert "http://testserver/products/CRAWL-NONE/" in product_pages
    assert any(r.get("page") and "?page=30" in url for url, r in product_pages.items())


def test_sitemap_lists_exactly_the_crawled_pages(client, crawl_site):
    crawled = set(crawl(client))
    index = client.get("/sitemap.xml")
    assert index.status_code == 200
    listed = set()
    for section in re.findall(r"<loc>(.*?)</loc>", index.content.decode()):
        response = client.get(path_and_query(section.replace("&amp;", "&")))
        assert response.status_code == 200, section
        listed.update(loc.replace("&amp;", "&") for loc in re.findall(r"<loc>(.*?)</loc>", response.content.decode()))
    assert listed == crawled


def test_robots_rules_match_as_search_engines_read_them(client, db):
    rules, _ = parse_robots(client.get("/robots.txt").content.decode())
    assert robots_allows(rules, "/products/KETTLE-2000/?page=292")
    assert robots_allows(rules, "/sitemap.xml")
    assert not robots_allows(rules, "/products/KETTLE-2000/comments/")
    assert not robots_allows(rules, "/products/KETTLE-2000/comments/0123abcd/report/")  # moderation
    assert not robots_allows(rules, "/products/KETTLE-2000/reported/")
    assert not robots_allows(rules, "/products/KETTLE-2000/?rating=5")
    assert not robots_allows(rules, "/products/KETTLE-2000/?page=3&cursor=abc")
    assert not robots_allows(rules, "/admin/shop/product/")
    # The prefix-only rules read the same way by the standard library's (wildcard-less) parser.
    standard = RobotFileParser()
    standard.parse(client.get("/robots.txt").content.decode().splitlines())
    for path in ["/", "/products/KETTLE-2000/?page=292", "/admin/", "/api/v1/comments"]:
        assert standard.can_fetch("*", path) == robots_allows(rules, path), path
