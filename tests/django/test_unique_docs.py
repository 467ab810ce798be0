"""docs/unique-tasks.md's files run as they are, and print what the page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "unique-tasks.md"
BLOCK = re.compile(r"```python\n# file: (\S+)\n(.*?)```", re.DOTALL)
OUTPUT = re.compile(
    r"```\n\$ DJANGO_SETTINGS_MODULE=settings_unique python (\S+)\n(.*?)```", re.DOTALL
)


def test_the_walkthrough_prints_what_the_page_says(tmp_path: Path, redis_server: Any) -> None:
    text = DOC.read_text(encoding="utf-8")
    files = BLOCK.findall(text)
    assert {name for name, _ in files} == {
        "settings_unique.py",
        "reports.py",
        "unique_walkthrough.py",
    }
    for name, code in files:
        (tmp_path / name).write_text(code, encoding="utf-8")
    [(script, expected)] = OUTPUT.findall(text)
    env = {
        **os.environ,
        "REDIS_URL": redis_server.url,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "settings_unique",
    }
    env.pop("DRL_TEST_ACL", None)
    done = subprocess.run(
        [sys.executable, script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout == expected
