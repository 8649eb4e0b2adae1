import importlib

import pytest


@pytest.fixture
def moderators(db):
    """The Moderators group as migration moderation.0002 creates it. A transactional test's flush empties
    every table, and only permissions come back with it (post_migrate), so it is made again if needed."""
    from django.contrib.auth.models import Group, Permission

    migration = importlib.import_module("moderation.migrations.0002_moderators_group")

    group, _ = Group.objects.get_or_create(name="Moderators")
    group.permissions.add(*Permission.objects.filter(content_type__app_label="moderation",
                                                     codename__in=migration.PERMISSIONS))
    return group
