"""Loaded (via PYTHONPATH) only by processes the clock-skew test runs under libfaketime with
FAKETIME_DONT_FAKE_MONOTONIC=1. libfaketime 0.9.10 (Debian 12) fails CPython's time.sleep, which
sleeps with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), with EINVAL; and faking the monotonic
clock instead makes every threading wait hang for the offset. select() with a relative timeout is
untouched by an offset, so time.sleep goes through it here. Nothing else of the process changes."""
import select
import time


def _sleep(seconds: float) -> None:
    deadline = time.monotonic() + max(seconds, 0.0)
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
