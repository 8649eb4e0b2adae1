"""settings.PAGINATION_INDEX as tests change it: the AWS endpoint and attempts, the comments table
(both of its sources), and what the sources share between requests (CACHE_SECONDS)."""
from __future__ import annotations

import copy

from django.conf import settings
from django.test import override_settings


def index_config(*, aws: dict | None = None, table: str | None = None, cache_seconds: float | None = None,
                 **top) -> dict:
    """A copy of settings.PAGINATION_INDEX with the changes asked for."""
    config = {**settings.PAGINATION_INDEX, **top}
    config["AWS"] = {**settings.PAGINATION_INDEX.get("AWS", {}), **(aws or {})}
    config["SOURCES"] = copy.deepcopy(config.get("SOURCES", {}))
    for source in config["SOURCES"].values():
        if table is not None:
            source["TABLE"] = table
        if cache_seconds is not None:
            source["CACHE_SECONDS"] = cache_seconds
    return config


def aws_settings(**aws) -> override_settings:
    """override_settings of PAGINATION_INDEX["AWS"] keys (ENDPOINT_URL, MAX_ATTEMPTS, ...)."""
    return override_settings(PAGINATION_INDEX=index_config(aws=aws))


def table_settings(table: str) -> override_settings:
    """The comments table (and so both of its sources) named `table`."""
    return override_settings(COMMENTS_TABLE=table, PAGINATION_INDEX=index_config(table=table))


def set_cache_seconds(settings_fixture, seconds: float) -> None:
    """What pages share for `seconds`: the sources' windows and counts, and the product row."""
    settings_fixture.COMMENTS_FAST_CACHE_SECONDS = seconds
    settings_fixture.PAGINATION_INDEX = index_config(cache_seconds=seconds)


def endpoint_url() -> str | None:
    return settings.PAGINATION_INDEX["AWS"].get("ENDPOINT_URL")


def source_of(group: str):
    """The declared source that holds an index group (a SKU: "comments"; "SKU/4": "comment_ratings")."""
    from pagination_index import sources

    return sources.owner_of(group)


def shared_window(group: str, source: str | None = None):
    """The fast window pages share for a group (pagination_index.sequence.Shared), or None."""
    from pagination_index import sources
    from pagination_index.sequence import shared

    state = shared(sources[source] if source else source_of(group))
    generation = state.generations([group])[group]
    return state.cache.get(state._key("window", group, generation))


def put_shared_window(group: str, window, source: str | None = None) -> None:
    """Share `window` for a group under its current generation, as a request that read it would."""
    from pagination_index import sources
    from pagination_index.sequence import shared

    state = shared(sources[source] if source else source_of(group))
    generation = state.generations([group])[group]
    state.cache.set(state._key("window", group, generation), window, state.seconds)
    state._memo.clear()


def use_table(settings_fixture, table: str) -> None:
    """The comments table named `table` for the rest of the test (pytest-django's settings fixture)."""
    settings_fixture.COMMENTS_TABLE = table
    settings_fixture.PAGINATION_INDEX = index_config(table=table)


def set_pages(settings_fixture, page_size: int, fast_pages: int) -> None:
    """Comments per page and pages read from the fast window, and the sources' FAST_ITEMS with them."""
    settings_fixture.COMMENTS_PAGE_SIZE, settings_fixture.COMMENTS_FAST_PAGES = page_size, fast_pages
    config = index_config()
    for source in config["SOURCES"].values():
        source["FAST_ITEMS"] = page_size * fast_pages
    settings_fixture.PAGINATION_INDEX = config
