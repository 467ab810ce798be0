"""The built wheel ships the Lua scripts (with their shared library), the admin's templates,
static files and migrations, and py.typed; nothing from tests or the example."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_contents(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("django_redis_locks-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    package = ROOT / "django_redis_locks"
    shipped = {
        path.relative_to(ROOT).as_posix()
        for pattern in (
            "core/protocol/scripts/*.lua",
            "core/protocol/scripts/lib/*.lua",
            "templates/**/*.html",
            "static/**/*.*",
            "migrations/*.py",
        )
        for path in package.glob(pattern)
    }
    # Every script, the libraries they include, and every kind of file the admin needs.
    assert {n.rsplit("/", 1)[0] for n in shipped} >= {
        "django_redis_locks/core/protocol/scripts",
        "django_redis_locks/core/protocol/scripts/lib",
        "django_redis_locks/migrations",
        "django_redis_locks/static/django_redis_locks",
    }
    assert any(n.endswith(".html") for n in shipped)
    assert not shipped - names, sorted(shipped - names)
    scripts = {
        f"django_redis_locks/core/protocol/scripts/{p.name}"
        for p in resources.files("django_redis_locks.core.protocol").joinpath("scripts").iterdir()
        if p.name.endswith(".lua")
    }
    assert scripts <= shipped
    assert "django_redis_locks/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "example_project/"))]
