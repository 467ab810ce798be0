"""The Python examples of the README and of docs/ name nothing they do not import or define.

A reader copies an example into a project; a name it uses but never imports (``SKIPPED``,
``math``, ``HttpResponse``) is a ``NameError`` there. Each fenced ``python`` block is checked
alone: every name it reads is a builtin, or imported, defined or assigned in that block, or
one of the few placeholders for the reader's own code (``PLACEHOLDERS``). A block that shows
a signature (``Lock(name, *, timeout=None, ...)``) must be a valid parameter list.
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [ROOT / "docs" / page for page in ("reference.md", "guarantees.md", "testing.md")]
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
_SIGNATURE = re.compile(r"[A-Za-z_]\w*\((.*)\)\s*", re.DOTALL)
#: What the docs' fragments leave to the reader: their own functions and values.
PLACEHOLDERS = {"compute", "pk", "batches", "process", "SENTINELS"}


def python_blocks(text: str) -> list[str]:
    return _BLOCK.findall(text)


def docs_blocks() -> list[tuple[str, str]]:
    return [
        (f"{page.name}-{index}", block)
        for page in DOCS
        for index, block in enumerate(python_blocks(page.read_text()))
    ]


def is_signature(block: str) -> bool:
    """A block showing a signature, ``Name(params)``, whose parameters parse as a def's."""
    match = _SIGNATURE.fullmatch(block)
    if match is None:
        return False
    try:
        compile(f"def f({match.group(1)}): ...", "<signature>", "exec")
    except SyntaxError:
        return False
    return True


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


def test_a_signature_block_must_be_a_valid_parameter_list() -> None:
    assert is_signature("Lock(name, *, timeout=None,\n     blocking=True)\n")
    assert not is_signature("Lock(name, *, timeout=None, timeout=1)\n")  # repeated
    assert not is_signature("Lock(name, timeout=None, *)\n")


@pytest.mark.parametrize(("where", "block"), docs_blocks(), ids=[w for w, _ in docs_blocks()])
def test_every_docs_example_imports_what_it_uses(where: str, block: str) -> None:
    if is_signature(block):
        return
    assert unbound_names(block) - PLACEHOLDERS == set(), block


def test_the_readme_starts_with_the_demo_and_the_tests() -> None:
    """Under its title, the README's first lines are the two commands that run the demo and
    the tests, and nothing else (whatever else moves)."""
    lines = README.read_text().splitlines()
    assert lines[:3] == ["# django-redis-locks", "", "```bash"]
    assert [line.split()[0] for line in lines[3:5]] == ["bin/demo", "bin/test"]
    assert lines[5] == "```"


def test_a_newcomer_reaches_install_and_quickstart_first() -> None:
    """After the two commands and one paragraph of what it is, the README's first sections are
    Install and Quickstart: the demo's tour and the feature list come after them."""
    headings = [line for line in README.read_text().splitlines() if line.startswith("## ")]
    assert headings[:2] == ["## Install", "## Quickstart"]
    text = README.read_text()
    assert text.index("## Install") < text.index("- **`@redis_lock`**")
    assert text.index("## Install") < text.index("Worker processes keep it busy")
