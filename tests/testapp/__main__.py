"""The test project's manage.py: ``python -m tests.testapp <command> ...`` from the root.

(Not a file named manage.py: pytest-django would put its directory on sys.path, and
tests/django would then hide Django.)
"""

from __future__ import annotations

import os
import sys

from django.core.management import execute_from_command_line

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.testapp.settings")
    execute_from_command_line(["manage.py", *sys.argv[1:]])
