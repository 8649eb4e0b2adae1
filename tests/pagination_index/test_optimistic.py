"""pagination_index.aws.retries.optimistic(): the one loop of the library's optimistic reads and
conditional writes (the DynamoDB backend's), whose races the backend tests make for real
(test_backends.py, two appliers on one group; writes while the group is rewritten)."""
import pytest

from pagination_index.aws.retries import Backoff, KeptConflicting, optimistic


class CountedBackoff(Backoff):
    def __init__(self):
        object.__setattr__(self, "pauses", [])

    def sleep(self, attempt: int) -> None:
        self.pauses.append(attempt)


def test_a_loop_that_gets_through_pauses_only_between_attempts():
    backoff, seen = CountedBackoff(), []
    for attempt in optimistic("read g", attempts=5, backoff=backoff):
        seen.append(attempt)
        if attempt == 2:
            break
    assert seen == [0, 1, 2]
    assert backoff.pauses == [0, 1]  # before the second and the third attempt, growing


def test_a_loop_that_keeps_losing_names_what_kept_conflicting():
    backoff = CountedBackoff()
    with pytest.raises(KeptConflicting, match="rewrite g: still conflicting after 4 attempts"):
        for _ in optimistic("rewrite g", attempts=4, backoff=backoff):
            continue
    assert backoff.pauses == [0, 1, 2]


def test_give_up_false_just_ends_the_loop():
    attempts = [attempt for attempt in optimistic("re-mark g", attempts=3, backoff=CountedBackoff(), give_up=False)]
    assert attempts == [0, 1, 2]
