"""migrate_redis_index: an index in the old single-node layout (<prefix>g:<group> and a registry set)
copied into the hash-tagged layout on a real Redis Cluster, group for group."""
import io

import pytest
import redis
from django.core.management import CommandError, call_command

from pagination_index import get_index
from pagination_index.backends.redis import sort_key_score
from stack.dynamodb_local import free_port
from pagination_index.testing import sk
from tests.config import index_config

OLD = {"SKU-1": [("a", sk(1)), ("b", sk(2))], "SKU-1/4": [("a", sk(1))], "Café-茶": [("c", sk(3))]}


@pytest.fixture
def old_index(redis_index_options):
    """The old layout on the machine's Redis, under a prefix of the test's own (deleted afterwards)."""
    client = redis.Redis.from_url(redis_index_options["LOCATION"])
    prefix = redis_index_options["KEY_PREFIX"]
    for group, entries in OLD.items():
        client.zadd(f"{prefix}g:{group}", {member: sort_key_score(sort_key) for member, sort_key in entries})
    client.sadd(f"{prefix}groups", *OLD)
    yield client, redis_index_options
    client.close()


def test_old_layout_is_copied_into_a_cluster(settings, old_index, redis_cluster_index_options):
    client, old_options = old_index
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["redis"],
                                 "OPTIONS": redis_cluster_index_options})
    source = ["--from", old_options["LOCATION"], "--from-prefix", old_options["KEY_PREFIX"]]
    out = io.StringIO()
    call_command("migrate_redis_index", *source, "--dry-run", stdout=out)
    assert "would copy 3 groups (4 entries)" in out.getvalue()
    assert get_index().groups() == []

    call_command("migrate_redis_index", *source, "--delete-old", stdout=out, verbosity=0)
    index = get_index()
    assert index.groups() == sorted(OLD)
    for group, entries in OLD.items():
        assert index.range(group, 0, 10) == sorted(entries, key=lambda e: (e[1], e[0]), reverse=True)
    assert list(client.scan_iter(match=old_options["KEY_PREFIX"] + "*")) == []


def test_an_unreachable_old_redis_is_a_command_error(settings, redis_index_options):
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["redis"], "OPTIONS": redis_index_options})
    with pytest.raises(CommandError, match="old index's Redis failed"):
        call_command("migrate_redis_index", "--from", f"redis://127.0.0.1:{free_port()}/0", verbosity=0)
