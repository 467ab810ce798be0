"""The README's Python examples name nothing they do not import or define.

A reader copies an example into a project; a name it uses but never imports (``SKIPPED``,
``math``, ``HttpResponse``) is a ``NameError`` there. Each fenced ``python`` block is checked
alone: every name it reads is a builtin, or imported, defined or assigned in that block.
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def python_blocks(text: str) -> list[str]:
    return _BLOCK.findall(text)


def unbound_names(source: str) -> set[str]:
    """Names ``source`` reads that it neither binds nor imports (builtins allowed)."""
    tree = ast.parse(source)
    bound: set[str] = set(dir(builtins))
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
    return read - bound


def test_the_check_finds_a_missing_import() -> None:
    assert unbound_names("import math\nprint(math.pi, SKIPPED)\n") == {"SKIPPED"}
    assert unbound_names("from x import y\ndef f(a):\n    return y(a)\n") == set()


def test_the_readme_has_python_examples() -> None:
    assert len(python_blocks(README.read_text())) >= 5


@pytest.mark.parametrize("index", range(len(python_blocks(README.read_text()))))
def test_every_readme_example_imports_what_it_uses(index: int) -> None:
    block = python_blocks(README.read_text())[index]
    assert unbound_names(block) == set(), block
