"""docs/testing.md's examples run: with pytest (its plugin) and with Django's test runner,
against the suite's Redis, as a project's own test suite would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "testing.md"
BLOCK = re.compile(r"```python\n# file: (\S+)\n(.*?)```", re.DOTALL)


@pytest.fixture
def project(tmp_path: Path, redis_server: Any) -> tuple[Path, dict[str, str]]:
    """The doc's files, written into a directory as a project of their own."""
    files = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert {name for name, _ in files} >= {
        "settings_test.py",
        "app_under_test.py",
        "conftest.py",
        "test_with_pytest.py",
        "test_with_django_runner.py",
    }
    for name, code in files:
        (tmp_path / name).write_text(code, encoding="utf-8")
    env = {
        **os.environ,
        "REDIS_URL": redis_server.url,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "settings_test",
    }
    env.pop("DRL_TEST_ACL", None)
    return tmp_path, env


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_pytest_examples_pass(project: tuple[Path, dict[str, str]]) -> None:
    directory, env = project
    done = run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_with_pytest.py"],
        directory,
        env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout


def test_the_django_test_runner_examples_pass(project: tuple[Path, dict[str, str]]) -> None:
    directory, env = project
    done = run([sys.executable, "-m", "django", "test", "test_with_django_runner"], directory, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Ran 2 tests" in done.stderr and "OK" in done.stderr
