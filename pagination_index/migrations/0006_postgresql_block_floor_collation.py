"""PostgreSQL only: byte-order collation ("C") on the blocks' floor columns, as 0002 gave the
entries' sort_key and member.

A block is found by comparing its floor with an entry's key, `(floor_sort_key, floor_member) <=
(sort_key, member)`, and the floors are cut from the entries in their order. With the floors in the
database's default collation and the keys in "C":
- the comparison takes the "C" collation (PostgreSQL's rule when one side has a non-default
  collation), and the blocks' unique index, built in the default collation, cannot serve it: the
  write path, which counts the keys an INSERT or DELETE returns into their blocks inside the same
  statement (bench/notes/relational-writes.md), would scan the group's blocks for every key;
- on a database created with a locale collation (en_US.UTF-8, ...), blocks would be ordered
  differently from the entries they count.
"C" also compares with memcmp rather than strcoll. SQLite already compares by bytes; left alone.
The ALTER rebuilds the blocks' unique index (blocks are about a thousandth of the entries).
"""
from django.db import migrations

TABLE = "pagination_index_indexblock"

FORWARD = [
    f'ALTER TABLE {TABLE} ALTER COLUMN floor_sort_key TYPE varchar(64) COLLATE "C", '
    f'ALTER COLUMN floor_member TYPE varchar(255) COLLATE "C"',
]
BACKWARD = [
    f'ALTER TABLE {TABLE} ALTER COLUMN floor_sort_key TYPE varchar(64) COLLATE "default", '
    f'ALTER COLUMN floor_member TYPE varchar(255) COLLATE "default"',
]


def _on_postgresql(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ("pagination_index", "0005_stream_leases_and_stale_groups"),
    ]

    operations = [
        migrations.RunPython(_on_postgresql(FORWARD), _on_postgresql(BACKWARD)),
    ]
