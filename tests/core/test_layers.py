"""The core never imports the Django layer: not at import time, not lazily, not at all."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "django_redis_locks" / "core"


def imported_modules(path: Path) -> list[str]:
    """Every module ``path`` imports, anywhere in it, relative ones made absolute."""
    package = "django_redis_locks.core"
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


def test_no_core_module_imports_django_or_the_django_layer() -> None:
    offenders = []
    for path in sorted(CORE.glob("*.py")):
        for module in imported_modules(path):
            django = module == "django" or module.startswith(("django.", "django_redis."))
            layer = module.startswith("django_redis_locks") and not module.startswith(
                "django_redis_locks.core"
            )
            if django or layer:
                offenders.append(f"{path.name}: {module}")
    assert offenders == []
