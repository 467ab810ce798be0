"""The built wheel ships the Lua scripts and py.typed, and nothing from tests or the example."""

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
    scripts = {
        f"django_redis_locks/core/scripts/{p.name}"
        for p in resources.files("django_redis_locks.core").joinpath("scripts").iterdir()
        if p.name.endswith(".lua")
    }
    assert scripts
    assert scripts <= names
    assert "django_redis_locks/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "example_project/"))]
