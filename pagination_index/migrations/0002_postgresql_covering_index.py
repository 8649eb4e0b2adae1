"""PostgreSQL only: byte-order collation on the ordered columns, and sort_key INCLUDEd in the
(group, member) unique index.

- DynamoDB orders strings by their UTF-8 bytes; a database created with a locale collation
  (en_US.UTF-8, ...) would order ties and Unicode differently from the GSI. Collation "C" is that
  byte order (and compares faster).
- The upsert reads (member, sort_key) by (group, member): with sort_key INCLUDEd that is an
  index-only scan. The rank index needs nothing INCLUDEd: member is already one of its key columns,
  as it must be, since ties are ordered by member.

SQLite already compares by bytes (BINARY) and has no INCLUDE, so it is left alone: doing this here
rather than with Meta.indexes/db_collation keeps the model portable (no models.W040 warning, no
vendor-specific collation name).
"""
from django.db import migrations

TABLE = "pagination_index_indexentry"
CONSTRAINT = "pagination_index_entry_member"

FORWARD = [
    f'ALTER TABLE {TABLE} ALTER COLUMN member TYPE varchar(255) COLLATE "C", '
    f'ALTER COLUMN sort_key TYPE varchar(64) COLLATE "C"',
    f"ALTER TABLE {TABLE} DROP CONSTRAINT {CONSTRAINT}",
    f'ALTER TABLE {TABLE} ADD CONSTRAINT {CONSTRAINT} UNIQUE ("group", member) INCLUDE (sort_key)',
]
BACKWARD = [
    f"ALTER TABLE {TABLE} DROP CONSTRAINT {CONSTRAINT}",
    f'ALTER TABLE {TABLE} ADD CONSTRAINT {CONSTRAINT} UNIQUE ("group", member)',
    f'ALTER TABLE {TABLE} ALTER COLUMN member TYPE varchar(255) COLLATE "default", '
    f'ALTER COLUMN sort_key TYPE varchar(64) COLLATE "default"',
]


def _on_postgresql(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ("pagination_index", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(_on_postgresql(FORWARD), _on_postgresql(BACKWARD)),
    ]
