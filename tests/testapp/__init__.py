"""A small app for the command tests: semaphore-limited management commands.

Its commands run in-process (``call_command``, the app is in ``tests.settings``) and as real
``manage.py`` processes (``python -m tests.testapp``, with ``tests.testapp.settings``, which
reads the Redis URL and key namespace from the environment).
"""
