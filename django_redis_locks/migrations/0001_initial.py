"""The unmanaged LiveLock model: no table, only its content type and permissions."""

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="LiveLock",
            fields=[
                (
                    "id",
                    models.AutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
            ],
            options={
                "verbose_name": "live lock",
                "verbose_name_plural": "live locks and semaphores",
                "permissions": [
                    ("force_release_livelock", "Can force-release lock and semaphore holds")
                ],
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
    ]
