"""The package's shape, measured: no import cycles between its modules, no module much over 300
lines without a stated reason, no module named after one of the standard library's, and the
old import paths still working."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "django_redis_locks"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path) -> set[str]:
    """The package's modules that ``path`` imports anywhere (in functions too, where an
    import is often put only to hide a cycle), except under ``if TYPE_CHECKING:``."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            # ``from package import module`` imports that module
            found.update(f"{module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in imports_of(path):
            # an import of a.b.c runs a, a.b and a.b.c: count the deepest module of ours and
            # the packages above it (their __init__ runs first), but those of the importer
            # itself, which are running already
            target = imported
            while target and target not in modules:
                target = target.rpartition(".")[0]
            while target:
                if target != name and not name.startswith(target + "."):
                    targets.add(target)
                target = target.rpartition(".")[0]
                if target not in modules:
                    break
        edges[name] = targets
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return sorted(found)


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: Modules allowed past LONGEST lines, and why.
LONG_MODULES = {
    "core/runtime/acquiring.py": "the acquire loop, written once for sync and asyncio callers: "
    "bounded bypass, deadlines and the undo of an interrupted grant read as one algorithm",
    "core/runtime/driver.py": "runs each kind of effect twice, sync and asyncio, side by side, "
    "so that the two stay alike",
    "core/connection/backend.py": "the Backend: what one connection gives the core (clients, "
    "key space, defaults, the eviction check), each a few lines",
    "core/runtime/renewal.py": "the renewer's lanes and their schedule: the threads of one "
    "mechanism, which must stop together (fork, exit)",
}
#: About 300 lines: past this a module needs its reason above.
LONGEST = 330


def test_no_module_is_much_over_300_lines_without_a_stated_reason() -> None:
    lines = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    over = {name: count for name, count in lines.items() if count > LONGEST}
    assert set(over) <= set(LONG_MODULES), over
    assert all(name in lines for name in LONG_MODULES), "a reason for a module that is gone"


def test_no_module_is_named_after_a_standard_library_module() -> None:
    # (a module named ``inspect`` shadows the standard library's wherever its directory is on
    # sys.path: a script run from it, some tools' import modes)
    clashes = [
        module_name(path) for path in PACKAGE.rglob("*.py") if path.stem in sys.stdlib_module_names
    ]
    assert clashes == []


def test_the_old_inspect_path_is_the_inspection_module() -> None:
    import django_redis_locks
    import django_redis_locks.inspect as old
    import django_redis_locks.inspection as new
    from django_redis_locks.inspect import get_lock

    assert old is new is django_redis_locks.inspect
    assert get_lock is new.get_lock
