"""The core never imports the Django layer: not at import time, not lazily, not at all; nor do
the exporters, which stand on the core alone."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_redis_locks"
CORE = PACKAGE / "core"


def _package_of(path: Path) -> str:
    """The dotted package ``path`` belongs to (what its relative imports start from)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts if path.name == "__init__.py" else parts[:-1]).removesuffix(".__init__")


def imported_modules(path: Path) -> list[str]:
    """Every module ``path`` imports, anywhere in it, relative ones made absolute."""
    package = _package_of(path)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                found.append(f"{base}.{node.module}" if node.module else base)
            else:
                found.append(node.module or "")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.append(str(node.args[0].value))
    return found


def _offenders(folder: Path) -> list[str]:
    """Imports of Django, or of the package outside the core and ``folder`` itself."""
    own = _package_of(folder / "__init__.py")
    offenders = []
    for path in sorted(folder.rglob("*.py")):
        for module in imported_modules(path):
            django = module == "django" or module.startswith(("django.", "django_redis."))
            layer = module.startswith("django_redis_locks") and not module.startswith(
                ("django_redis_locks.core", own)
            )
            if django or layer:
                offenders.append(f"{path.relative_to(PACKAGE)}: {module}")
    return offenders


def test_no_core_module_imports_django_or_the_django_layer() -> None:
    assert len(list(CORE.rglob("*.py"))) > 30  # every subpackage is read
    assert _offenders(CORE) == []


def test_the_exporters_stand_on_the_core_alone() -> None:
    assert _offenders(PACKAGE / "exporters") == []


def test_relative_imports_resolve_from_the_modules_own_package() -> None:
    runtime = imported_modules(CORE / "runtime" / "renewal.py")
    assert "django_redis_locks.core.runtime.callbacks" in runtime
    assert "django_redis_locks.core.protocol.scripting" in runtime
