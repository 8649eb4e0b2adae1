"""Django's cache on Redis (CACHE_BACKEND=redis: shop.cache.SharedRedisCache) when its Redis cannot be
reached: killed, frozen, or named by no Sentinel. Pages are served as with the caches off and posts are
taken (they were 500s: django-redis raises), and a failure costs one attempt per fail-fast window."""
import signal
import threading
import time
import uuid

import pytest
import redis
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client
from prometheus_client import REGISTRY

from shop.settings import redis_cache
from stack.dynamodb_local import free_port
from tests import factories

SKU = "CACHE-DOWN-1"
PAGE_1 = f"/products/{SKU}/"
DEEP = f"/products/{SKU}/?page=12"  # past the fast window: the index and one Query
UNAVAILABLE = "shop_cache_unavailable_total"

pytestmark = pytest.mark.usefixtures("strict_dynamodb_settings")


@pytest.fixture
def deep_product(db, comments_table):
    factories.product(SKU, "Cacheless kettle")
    factories.seed(SKU, 260, seed=5)
    call_command("rebuild_index", group=[SKU], verbosity=0)


@pytest.fixture(autouse=True)
def _fresh_breakers():
    """Each test's Redis is its own (a port a later test may get again): no window carried over."""
    from shop import cache as shared

    shared._BREAKERS.clear()
    yield
    shared._BREAKERS.clear()


@pytest.fixture
def browser():
    return Client(headers={"Origin": "http://testserver"})  # browsers send Origin on a form POST


def use_cache(settings, monkeypatch, url: str, fail_fast: float) -> None:
    monkeypatch.setenv("CACHE_FAIL_FAST_SECONDS", str(fail_fast))
    settings.CACHES = {**settings.CACHES, "default": redis_cache(url, f"test-{uuid.uuid4().hex[:8]}")}


def failures() -> float:
    return REGISTRY.get_sample_value(UNAVAILABLE) or 0.0


def test_a_dead_cache_serves_pages_and_takes_posts(browser, deep_product, settings, monkeypatch, redis_server, caplog):
    use_cache(settings, monkeypatch, f"redis://127.0.0.1:{redis_server.port}/0", fail_fast=60)
    shared = redis.Redis(port=redis_server.port)
    assert browser.get(DEEP).status_code == 200
    assert shared.dbsize() > 0  # the pages use this cache
    redis_server.kill()
    before = failures()
    for path in (DEEP, PAGE_1, f"/products/{SKU}/?page=3", "/", "/sitemap.xml"):
        assert browser.get(path).status_code == 200, path
    body = f"Posted while the cache was down {uuid.uuid4().hex[:6]}."
    posted = browser.post(f"{PAGE_1}comments/", {"author": "Ann", "rating": "4", "body": body})
    assert posted.status_code == 303
    assert body in browser.get(posted["Location"]).content.decode()
    # Everything above asked Redis once: the first failure opened a 60 s window.
    assert failures() - before == 1
    assert [r.levelname for r in caplog.records if r.name == "shop.cache"] == ["WARNING"]


def test_the_cache_is_used_again_after_its_window(browser, deep_product, settings, monkeypatch, redis_server):
    use_cache(settings, monkeypatch, f"redis://127.0.0.1:{redis_server.port}/0", fail_fast=0.5)
    redis_server.kill()
    assert browser.get(DEEP).status_code == 200
    redis_server.start()  # on the same port
    time.sleep(0.6)
    assert browser.get(DEEP).status_code == 200
    assert redis.Redis(port=redis_server.port).dbsize() > 0
    assert cache.get("nothing-here", "default") == "default"


def test_a_frozen_cache_costs_one_timeout_a_window(browser, deep_product, settings, monkeypatch, redis_server):
    """SIGSTOP: the kernel still accepts connections, nothing answers. Without socket timeouts a
    worker waits forever; with them, the first call waits SOCKET_TIMEOUT (twice: one retry) and the
    page's other calls not at all."""
    use_cache(settings, monkeypatch, f"redis://127.0.0.1:{redis_server.port}/0", fail_fast=60)
    assert browser.get(DEEP).status_code == 200  # connections pooled before the freeze
    redis_server.process.send_signal(signal.SIGSTOP)
    try:
        before = failures()
        started = time.monotonic()
        assert browser.get(DEEP).status_code == 200
        assert browser.get(PAGE_1).status_code == 200
        elapsed = time.monotonic() - started
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
    assert failures() - before == 1
    assert elapsed < 10, elapsed  # not hung (each call would wait out its own timeouts: 5 calls x 2 s)


def test_a_sentinel_url_with_no_sentinel_answering(browser, deep_product, settings, monkeypatch):
    """redis+sentinel:// whose Sentinels are all down: django-redis's MasterNotFoundError, as in the
    moments of a failover when no Sentinel names a healthy primary."""
    # A service name no other test uses: django-redis keeps its pools for the whole process, keyed by
    # the URL it is given, which for Sentinels names the service only, not the Sentinels.
    use_cache(settings, monkeypatch, f"redis+sentinel://127.0.0.1:{free_port()}/cache-down/0", fail_fast=60)
    before = failures()
    assert browser.get(DEEP).status_code == 200
    assert browser.get(PAGE_1).status_code == 200
    assert failures() - before == 1


def test_after_the_window_one_thread_asks_and_the_others_answer_at_once(settings, monkeypatch, redis_server):
    """Django makes a cache object per thread; the window and its probe are the process's."""
    from django.core.cache import caches

    use_cache(settings, monkeypatch, f"redis://127.0.0.1:{redis_server.port}/0", fail_fast=0.3)
    cache = caches["default"]
    assert cache.set("kept", "value", 60)
    redis_server.process.send_signal(signal.SIGSTOP)
    try:
        before = failures()
        assert cache.get("kept") is None  # waits out the read timeout: the window opens
        time.sleep(0.4)
        prober = threading.Thread(target=lambda: caches["default"].get("kept"))
        prober.start()
        deadline = time.monotonic() + 5
        while not cache.breaker.probing:
            assert time.monotonic() < deadline, "no thread went to ask Redis after the window"
            time.sleep(0.01)
        assert [cache.get("kept", "missed") for _ in range(20)] == ["missed"] * 20  # at once, meanwhile
        assert prober.is_alive()
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
    prober.join(30)
    # Only the first call failed: the 20 others never asked, and the probe's PING was answered once
    # Redis went on, which closed the window for every thread.
    assert failures() - before == 1
    assert cache.breaker.failed_at is None
    assert cache.get("kept") == "value"
