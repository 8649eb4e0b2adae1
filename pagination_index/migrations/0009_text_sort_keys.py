"""Sort keys of any text (up to DynamoDB's 1,024 bytes) and members of any table key: the relational
backend's sort_key and member columns widen (entries, block floors, the rebuild journal).

On PostgreSQL, widening a varchar is a change of its limit only: no rewrite of the table or its
indexes. The columns the rank order compares keep their byte-order collation ("C", 0002 and 0006), so
the statements name it again. SQLite does not enforce a varchar's length: only Django's state moves.
"""
from django.db import migrations, models

COLLATED = [
    ("pagination_index_indexentry", "sort_key", 1024),
    ("pagination_index_indexentry", "member", 512),
    ("pagination_index_indexblock", "floor_sort_key", 1024),
    ("pagination_index_indexblock", "floor_member", 512),
]
PLAIN = [("pagination_index_rebuildjournal", "sort_key", 1024), ("pagination_index_rebuildjournal", "member", 512)]
BEFORE = {"sort_key": 64, "floor_sort_key": 64, "member": 255, "floor_member": 255}


def _alter(columns, lengths, collate: bool):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for table, column, length in columns:
            collation = ' COLLATE "C"' if collate else ""
            schema_editor.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE varchar({lengths(column, length)}){collation}")

    return run


def forward(apps, schema_editor):
    _alter(COLLATED, lambda column, length: length, True)(apps, schema_editor)
    _alter(PLAIN, lambda column, length: length, False)(apps, schema_editor)


def backward(apps, schema_editor):
    _alter(COLLATED, lambda column, length: BEFORE[column], True)(apps, schema_editor)
    _alter(PLAIN, lambda column, length: BEFORE[column], False)(apps, schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ("pagination_index", "0008_postgresql_locate_function"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forward, backward)],
            state_operations=[
                migrations.AlterField("indexentry", "sort_key", models.CharField(max_length=1024)),
                migrations.AlterField("indexentry", "member", models.CharField(max_length=512)),
                migrations.AlterField("indexblock", "floor_sort_key", models.CharField(max_length=1024)),
                migrations.AlterField("indexblock", "floor_member", models.CharField(max_length=512)),
                migrations.AlterField("rebuildjournal", "sort_key",
                                      models.CharField(blank=True, default="", max_length=1024)),
                migrations.AlterField("rebuildjournal", "member", models.CharField(max_length=512)),
            ],
        ),
    ]
