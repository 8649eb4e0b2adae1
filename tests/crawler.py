"""A search engine's view of the site: robots.txt rules (with the `*` and `$` wildcards that
urllib.robotparser lacks) and a crawler that follows only <a href> links."""
from __future__ import annotations

import re
from collections import deque
from urllib.parse import urljoin, urlsplit

from tests.pages import parse


def parse_robots(text: str) -> tuple[list[tuple[bool, str]], list[str]]:
    """(allow?, pattern) rules of the `User-agent: *` group, and the Sitemap URLs."""
    rules, sitemaps, in_star_group = [], [], False
    for line in text.splitlines():
        field, _, value = line.partition(":")
        field, value = field.strip().lower(), value.strip()
        if field == "user-agent":
            in_star_group = value == "*"
        elif field in {"allow", "disallow"} and in_star_group and value:
            rules.append((field == "allow", value))
        elif field == "sitemap":
            sitemaps.append(value)
    return rules, sitemaps


def _pattern(rule: str) -> re.Pattern:
    anchored = rule.endswith("$")
    body = re.escape(rule.rstrip("$")).replace(r"\*", ".*")
    return re.compile(body + ("$" if anchored else ""))


def robots_allows(rules: list[tuple[bool, str]], path_and_query: str) -> bool:
    """RFC 9309: the longest matching rule wins; on a tie, allow wins; no match allows."""
    best = None
    for allow, rule in rules:
        if _pattern(rule).match(path_and_query):
            key = (len(rule), allow)
            best = key if best is None or key > best else best
    return best is None or best[1]


def path_and_query(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def crawl(client, start: str = "http://testserver/", limit: int = 2_000) -> dict[str, dict]:
    """Breadth-first from `start`, following <a href> links on the same host, never a <link>, nor an
    <a rel="nofollow"> (each comment's report link: robots.txt keeps crawlers out of it as well).
    Returns url -> {status, page (parsed), html, links (absolute a-hrefs followed)}."""
    host = urlsplit(start).netloc
    seen, queue, results = {start}, deque([start]), {}
    while queue and len(results) < limit:
        url = queue.popleft()
        response = client.get(path_and_query(url))
        html = response.content.decode() if response.status_code == 200 else ""
        page = parse(html)
        links = [urljoin(url, link["href"]) for link in page["links"]
                 if link["tag"] == "a" and "nofollow" not in (link.get("rel") or "").split()]
        results[url] = {"status": response.status_code, "page": page, "html": html, "links": links}
        for link in links:
            link = link.split("#")[0]
            if urlsplit(link).netloc == host and link not in seen:
                seen.add(link)
                queue.append(link)
    return results
