"""A "Moderators" group with what the staff screen needs: give a staff user this group."""
from django.contrib.auth.management import create_permissions
from django.db import migrations

PERMISSIONS = ["view_moderatedcomment", "moderate_comment", "view_report", "view_auditentry"]


def add_group(apps, schema_editor):
    # Permissions are created after all migrations (post_migrate): create this app's now.
    config = apps.get_app_config("moderation")
    config.models_module = True
    create_permissions(config, apps=apps, verbosity=0, using=schema_editor.connection.alias)
    config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.using(schema_editor.connection.alias).get_or_create(name="Moderators")
    group.permissions.add(*Permission.objects.using(schema_editor.connection.alias).filter(
        content_type__app_label="moderation", codename__in=PERMISSIONS))


def remove_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.using(schema_editor.connection.alias).filter(name="Moderators").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("moderation", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(add_group, remove_group)]
