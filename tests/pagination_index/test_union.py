"""The boundary search of a query over several groups (pagination_index.sequence.union_ranks) against
brute force, on the real relational index: every rank of unions of groups with many ties, some groups
empty or tiny."""
import random

import pytest

from pagination_index import index
from pagination_index.sequence import union_ranks
from pagination_index.backends.base import newest_first

SK = "2021-08-25T13:00:00.{:06d}Z"


@pytest.fixture
def groups(db):
    rng = random.Random(3)
    sizes = {"P/1": 0, "P/2": 3, "P/3": 150, "P/4": 260, "P/5": 420}
    members = iter(f"{n:032x}" for n in rng.sample(range(10**9), sum(sizes.values())))
    content = {}
    for group, size in sizes.items():
        # Few distinct sort keys: long runs of ties inside and across groups.
        content[group] = [(next(members), SK.format(rng.randrange(300))) for _ in range(size)]
        index.replace(group, content[group])
    return content


@pytest.mark.parametrize("chosen", [("P/3", "P/5"), ("P/1", "P/2", "P/4"), ("P/2", "P/3", "P/4", "P/5"),
                                    ("P/1", "P/2", "P/3", "P/4", "P/5")])
def test_union_ranks_find_every_boundary(groups, chosen):
    tagged = newest_first((member, sort_key) for group in chosen for member, sort_key in groups[group])
    group_of = {member: group for group in chosen for member, _ in groups[group]}
    ordered = {group: newest_first(groups[group]) for group in chosen}
    counts = index.count_many(chosen)
    for rank in sorted({*range(0, len(tagged), 4), 1, len(tagged) - 1}):
        ranks = union_ranks(index, list(chosen), counts, rank)
        boundary = tagged[rank]
        for group in chosen:
            at_or_before = [entry for entry in ordered[group] if (entry[1], entry[0]) >= (boundary[1], boundary[0])]
            assert ranks[group] == len(at_or_before) - 1, (rank, group)
        assert ordered[group_of[boundary[0]]][ranks[group_of[boundary[0]]]] == boundary


def test_union_ranks_stay_logarithmic(groups, django_assert_max_num_queries):
    chosen = ["P/2", "P/3", "P/4", "P/5"]
    counts = index.count_many(chosen)
    # Two queries per step; bisection on alternate steps bounds the steps by about
    # 2 * sum(log2(count)) = 2 * (2 + 8 + 9 + 9) = 56.
    for rank in (0, 1, 400, 832):
        with django_assert_max_num_queries(2 * 56):
            union_ranks(index, chosen, counts, rank)
