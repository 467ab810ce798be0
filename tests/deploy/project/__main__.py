"""The deployment project's manage.py: ``python -m tests.deploy.project <command> ...``."""

from __future__ import annotations

import os
import sys

from django.core.management import execute_from_command_line

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.deploy.project.settings")
    execute_from_command_line(["manage.py", *sys.argv[1:]])
