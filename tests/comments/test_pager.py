"""The pager's click graph: every page of 100,000 within 8 clicks of page 1, at most 45 links."""
from collections import deque
from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from comments.pager import page_href, pager_groups, pager_links, pager_numbers

MAX_CLICKS = 8
MAX_LINKS = 45  # numbered links plus "Previous" and "Next"


def links_shown(number: int, num_pages: int) -> int:
    numbered = sum(len(group) for group in pager_groups(number, num_pages)) - 1  # the current page is not a link
    return numbered + (number > 1) + (number < num_pages)


def clicks_from_first(num_pages: int) -> list[int]:
    """Breadth-first search over the pager's links: clicks[n] is the fewest clicks from page 1 to n."""
    clicks = [-1] * (num_pages + 1)
    clicks[1] = 0
    queue = deque([1])
    while queue:
        number = queue.popleft()
        for target in pager_numbers(number, num_pages):
            if clicks[target] < 0:
                clicks[target] = clicks[number] + 1
                queue.append(target)
    return clicks


def test_every_page_of_100000_is_within_8_clicks():
    clicks = clicks_from_first(100_000)
    assert min(clicks[1:]) == 0  # every page reached
    assert max(clicks[1:]) <= MAX_CLICKS


@pytest.mark.parametrize("num_pages", [2, 3, 7, 10, 11, 99, 100, 101, 1_234, 20_000])
def test_smaller_products_are_as_shallow(num_pages):
    clicks = clicks_from_first(num_pages)
    assert min(clicks[1:]) == 0 and max(clicks[1:]) <= MAX_CLICKS


def test_at_most_45_links_on_any_page_of_100000():
    assert max(links_shown(number, 100_000) for number in range(1, 100_001)) <= MAX_LINKS


def test_groups_ascend_and_hold_the_current_page():
    groups = pager_groups(54_321, 100_000)
    flat = [n for group in groups for n in group]
    assert flat == sorted(set(flat))
    assert groups[0] == [1] and groups[-1] == [100_000]
    assert [4_321, 24_321, 34_321, 44_321] in groups  # the jumps of 10,000 back, together
    assert [54_316, 54_318, 54_319, 54_320, 54_321, 54_322, 54_323, 54_324, 54_326] in groups


def test_single_page_has_no_pager_and_edges_are_not_repeated():
    assert pager_groups(1, 1) == []
    assert pager_groups(1, 2) == [[1], [2]]
    assert pager_numbers(1, 6) == {2, 3, 4, 6}


def test_links_point_at_the_page_urls():
    links = [link for group in pager_links("/products/X/", 3, 5) for link in group]
    assert [(link.number, link.href, link.current) for link in links] == [
        (1, "/products/X/", False), (2, "/products/X/?page=2", False), (3, "/products/X/?page=3", True),
        (4, "/products/X/?page=4", False), (5, "/products/X/?page=5", False)]
    assert page_href("/products/X/", 1) == "/products/X/"


@given(st.lists(st.integers(min_value=1, max_value=5), unique=True, max_size=5).map(sorted),
       st.integers(min_value=1, max_value=10**9))
def test_page_href_writes_what_urlencode_writes(ratings, number):
    params = [("rating", rating) for rating in ratings] + ([("page", number)] if number > 1 else [])
    assert page_href("/products/X-1/", number, ratings) == (f"/products/X-1/?{urlencode(params)}" if params
                                                             else "/products/X-1/")
