"""A consumer partitioned from PostgreSQL mid-transaction cannot hold the stream hostage (issue 43): its
sessions carry settings derived from the lease (pagination_index.leases.session_settings), so
PostgreSQL ends the session and releases its row locks within about half a lease. The partition is
real: nft drops the session's packets on loopback (root, as CI runs)."""
from __future__ import annotations

import shutil

import psycopg
import pytest
from django.db import connections

from pagination_index import leases
from pagination_index.leases import bound_sessions, session_settings
from pagination_index.models import ShardCheckpoint
from tests.services import LoopbackCut

LEASE = 4.0


@pytest.fixture
def nft():
    from tests.conftest import service_missing

    if not shutil.which("nft"):
        service_missing("nft is not installed (Debian: apt-get install nftables)")


def dsn(alias: str) -> str:
    settings = connections[alias].settings_dict
    return (f"host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432} dbname={settings['NAME']} "
            f"user={settings['USER']}" + (f" password={settings['PASSWORD']}" if settings["PASSWORD"] else ""))


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_consumers_sessions_get_the_lease_bound_settings(postgres_database):
    connection = connections[postgres_database]
    with bound_sessions(postgres_database, LEASE):
        connection.close()
        with connection.cursor() as cursor:  # a new session: the connection_created hook set them
            cursor.execute("SHOW idle_in_transaction_session_timeout")
            assert cursor.fetchone()[0] == "2s"
            cursor.execute("SHOW tcp_keepalives_count")
            assert cursor.fetchone()[0] == "3"
    assert postgres_database not in leases._SESSION_LEASES
    with connection.cursor() as cursor:  # after the consumer: ordinary sessions again
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        assert cursor.fetchone()[0] == "0"


@pytest.mark.parametrize("bounded", [True, False], ids=["lease-bound-session", "default-session-keeps-the-lock"])
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_partitioned_consumers_row_locks_go_within_a_lease(postgres_database, nft, bounded):
    row = ShardCheckpoint.objects.using(postgres_database).create(stream_arn="arn:test/stream/1", shard_id="s-1")
    consumer = psycopg.connect(dsn(postgres_database))
    standby = psycopg.connect(dsn(postgres_database), autocommit=True)
    try:
        if bounded:
            for name, value in session_settings(LEASE).items():
                consumer.execute("SELECT set_config(%s, %s, false)", (name, value))
            consumer.commit()
        port = consumer.execute("SELECT inet_client_port()").fetchone()[0]
        consumer.execute("SELECT id FROM pagination_index_shardcheckpoint WHERE id = %s FOR UPDATE", (row.pk,))
        # Mid-transaction, the consumer's host drops off the network, both ways.
        with LoopbackCut(source_port=port, destination_port=5432), LoopbackCut(source_port=5432, destination_port=port):
            standby.execute(f"SET lock_timeout = '{int(3 * LEASE)}s'")  # three leases: far past the bound
            take = "UPDATE pagination_index_shardcheckpoint SET lease_owner = 'standby' WHERE id = %s"
            if bounded:
                assert standby.execute(take, (row.pk,)).rowcount == 1
            else:  # what the settings prevent: the lock outlives three leases
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    standby.execute(take, (row.pk,))
    finally:
        standby.close()
        consumer.close()
