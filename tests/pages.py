"""Reading product pages the way a browser or crawler does: by the HTML and its links."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser

COMMENT = re.compile(r'id="comment-([^"]+)" data-sk="([^"]+)"')
STATUS = re.compile(r"page (\d+) of (\d+)")
JSON_LD = re.compile(r'<script type="application/ld\+json">(.*?)</script>', re.S)


class LinkParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[dict] = []
        self.in_pagination = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "nav" and "pagination" in (attrs.get("class") or ""):
            self.in_pagination = True
        if tag in {"a", "link"} and attrs.get("href") is not None:
            self.links.append(dict(attrs, tag=tag, in_pagination=self.in_pagination))

    def handle_endtag(self, tag):
        if tag == "nav":
            self.in_pagination = False


def parse(html: str) -> dict:
    parser = LinkParser()
    parser.feed(html)
    status = STATUS.search(html)
    return {
        "comments": COMMENT.findall(html),
        "links": parser.links,
        "next": next((l["href"] for l in parser.links if l["tag"] == "a" and l.get("rel") == "next"), None),
        "canonical": next((l["href"] for l in parser.links if l["tag"] == "link" and l.get("rel") == "canonical"), None),
        "status": tuple(map(int, status.groups())) if status else None,
        "pager": [l["href"] for l in parser.links if l["in_pagination"]],
    }


def json_ld(html: str) -> dict:
    """The page's schema.org JSON-LD, decoded; the raw text is JSON_LD's group 1."""
    return json.loads(JSON_LD.search(html).group(1))


def walk(client, url: str, limit: int = 10_000) -> list[tuple[str, dict]]:
    """Follow rel=next links from `url`; returns (url, parsed page) for every page visited."""
    visited = []
    while url and len(visited) < limit:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        page = parse(response.content.decode())
        visited.append((url, page))
        nxt = page["next"]
        url = None if nxt is None else (nxt if nxt.startswith("/") else url.split("?")[0] + nxt)
    return visited
