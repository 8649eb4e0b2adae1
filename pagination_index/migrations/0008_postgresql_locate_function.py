"""PostgreSQL only: `pagination_index_locate(group, rank)`, the rank tree's walk (backends/blocks.py,
BlockTree.locate) in one statement.

From Python the walk costs a statement per level plus one for the entry: three round trips for a
group of a few thousand to a few million entries, each with its client-side CPU (a cProfile of
`at()` on a 300,000-entry group: about 490 us of the reader's CPU, 160 per statement). The function
makes the same choices, level by level, on the server, and reads everything in one snapshot, so no
version check is needed: its blocks and entry are of one state of the group.

Each level's and the entry's query is built with its bounds (a bound that is absent is left out,
as BlockTree._between does, so each is planned with its own range and index) and run with EXECUTE
... USING. Returns one row (sort_key, member); sort_key is NULL when it cannot answer (no such
rank, a group without blocks yet, counts out of step with the entries: the caller takes the Python
walk, which retries), no row when the group does not exist.
"""
from django.db import migrations

FUNCTION = r"""
CREATE OR REPLACE FUNCTION pagination_index_locate(wanted_group varchar, wanted_rank bigint)
RETURNS TABLE (sort_key varchar, member varchar)
LANGUAGE plpgsql STABLE AS $body$
DECLARE
    group_id bigint;
    total bigint;
    levels integer;
    want bigint := wanted_rank;
    lo_sort varchar;  -- NULL: no lower bound (MIN)
    lo_member varchar;
    hi_sort varchar;  -- NULL: no upper bound
    hi_member varchar;
    pos bigint;
    from_bottom boolean;
    bounds text;
    block record;
    previous_sort varchar;
    previous_member varchar;
    hit boolean;
    found_sort varchar;
    found_member varchar;
BEGIN
    SELECT g.id, g.count, g.levels INTO group_id, total, levels
        FROM pagination_index_indexgroup g WHERE g.name = wanted_group;
    IF group_id IS NULL THEN
        RETURN;
    END IF;
    IF levels = 0 OR want < 0 OR want >= total THEN
        sort_key := NULL; member := NULL;
        RETURN NEXT;
        RETURN;
    END IF;
    FOR level IN REVERSE levels - 1 .. 0 LOOP
        from_bottom := 2 * want >= total;  -- scan from the nearer end
        pos := CASE WHEN from_bottom THEN total - 1 - want ELSE want END;
        bounds := '';
        IF lo_sort IS NOT NULL THEN
            bounds := bounds || ' AND (floor_sort_key, floor_member) >= ($3, $4) AND floor_sort_key >= $3';
        END IF;
        IF hi_sort IS NOT NULL THEN
            bounds := bounds || ' AND (floor_sort_key, floor_member) < ($5, $6) AND floor_sort_key <= $5';
        END IF;
        hit := false;
        previous_sort := NULL;
        previous_member := NULL;
        FOR block IN EXECUTE
            'SELECT floor_sort_key, floor_member, count FROM pagination_index_indexblock'
            ' WHERE group_id = $1 AND level = $2' || bounds ||
            CASE WHEN from_bottom THEN ' ORDER BY floor_sort_key ASC, floor_member ASC'
                 ELSE ' ORDER BY floor_sort_key DESC, floor_member DESC' END
            USING group_id, level, lo_sort, lo_member, hi_sort, hi_member
        LOOP
            IF hit THEN  -- the block after the one chosen (ascending): its floor bounds it
                hi_sort := block.floor_sort_key;
                hi_member := block.floor_member;
                EXIT;
            END IF;
            IF pos < block.count THEN
                hit := true;
                IF from_bottom THEN
                    want := block.count - 1 - pos;
                ELSE
                    want := pos;
                    IF previous_sort IS NOT NULL THEN  -- the block before it (descending) bounds it
                        hi_sort := previous_sort;
                        hi_member := previous_member;
                    END IF;
                END IF;
                lo_sort := block.floor_sort_key;
                lo_member := block.floor_member;
                total := block.count;
                IF NOT from_bottom THEN
                    EXIT;
                END IF;
            ELSE
                pos := pos - block.count;
                previous_sort := block.floor_sort_key;
                previous_member := block.floor_member;
            END IF;
        END LOOP;
        IF NOT hit THEN  -- counts out of step with the blocks: the caller retries
            sort_key := NULL; member := NULL;
            RETURN NEXT;
            RETURN;
        END IF;
    END LOOP;
    from_bottom := 2 * want >= total;
    bounds := ' AND (e.sort_key, e.member) >= ($2, $3) AND e.sort_key >= $2';
    IF hi_sort IS NOT NULL THEN
        bounds := bounds || ' AND (e.sort_key, e.member) < ($4, $5) AND e.sort_key <= $4';
    END IF;
    EXECUTE
        'SELECT e.sort_key, e.member FROM pagination_index_indexentry e WHERE e."group" = $1' || bounds ||
        CASE WHEN from_bottom THEN ' ORDER BY e.sort_key ASC, e.member ASC'
             ELSE ' ORDER BY e.sort_key DESC, e.member DESC' END ||
        ' LIMIT 1 OFFSET $6'
        INTO found_sort, found_member
        USING wanted_group, lo_sort, lo_member, hi_sort, hi_member,
              CASE WHEN from_bottom THEN total - 1 - want ELSE want END;
    sort_key := found_sort;
    member := found_member;
    RETURN NEXT;
END
$body$
"""
DROP = "DROP FUNCTION IF EXISTS pagination_index_locate(varchar, bigint)"


def _on_postgresql(statement):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ("pagination_index", "0007_rebuild_fences"),
    ]

    operations = [
        migrations.RunPython(_on_postgresql(FUNCTION), _on_postgresql(DROP)),
    ]
