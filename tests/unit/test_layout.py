"""The layout's rules that no linter holds (docs/design.md, "Layers"): read from the source."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "functions" / "squall"
SOURCES = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "stacks").rglob("*.py")])
# "About 800 lines" (issue 12): a module past this wants splitting by what it does.
MAX_MODULE_LINES = 850
# Protocols that are no port of the functions: what one part of the code asks of another
# part beside it (a view, the pods' runner, a queue the local runtime picks), what only
# the local runtime asks of a store, or a type's private shape. A Protocol that the
# functions' or the follow loops' adapters implement belongs in squall/ports.py.
INTERNAL_PROTOCOLS = {
    "squall/local/backends.py": {"LocalJobStore"},
    "squall/cli/follow/watch.py": {"View"},
    "squall/local/scenario/simulation.py": {"LiveView"},
    "squall/local/cluster/pods.py": {"PodRunner"},
    "squall/local/queues.py": {"LocalQueue"},
    "squall/local/memory.py": {"_Record"},
    "squall/services/admission.py": {"Report"},
    "squall/adapters/aws/job_store.py": {"Transition"},
    "squall/core/spec/model.py": {"_CpuAndMemory"},
}


def _classes(path: Path) -> list[ast.ClassDef]:
    """The module's own classes (a class nested in another is its business)."""
    return [n for n in ast.parse(path.read_text(), str(path)).body if isinstance(n, ast.ClassDef)]


def _is_protocol(node: ast.ClassDef) -> bool:
    return any(isinstance(b, ast.Name) and b.id == "Protocol" for b in node.bases)


def _where(path: Path) -> str:
    return str(path.relative_to(ROOT / "functions" if path.is_relative_to(PACKAGE) else ROOT))


def test_the_sources_are_found() -> None:
    assert PACKAGE / "ports.py" in SOURCES
    assert ROOT / "stacks" / "deployment.py" in SOURCES


def test_no_two_classes_share_a_name() -> None:
    # A name is one thing across the functions and the stacks: a reader (or a grep)
    # never has to ask which Node, Pod or RegionCapacity is meant.
    found: dict[str, list[str]] = defaultdict(list)
    for path in SOURCES:
        for node in _classes(path):
            found[node.name].append(_where(path))
    assert {name: places for name, places in found.items() if len(places) > 1} == {}


def test_every_port_is_in_ports_py() -> None:
    outside = {
        _where(path): {n.name for n in _classes(path) if _is_protocol(n)}
        for path in SOURCES
        if path != PACKAGE / "ports.py"
    }
    assert {where: names for where, names in outside.items() if names} == INTERNAL_PROTOCOLS


def test_no_module_under_functions_is_over_the_size_line() -> None:
    sizes = {_where(path): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert {where: n for where, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT / "functions").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level_imports(path: Path) -> set[str]:
    """The squall modules a module imports at its top, under `if TYPE_CHECKING:` too.

    A lazy import inside a function is how a module says "only on this path"; an import
    at the top (typing's included) is a dependency of the module as a whole.
    """
    found: set[str] = set()
    statements = list(ast.parse(path.read_text(), str(path)).body)
    while statements:
        node = statements.pop()
        if isinstance(node, ast.If):
            statements.extend([*node.body, *node.orelse])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("squall"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("squall"))
    return found


def test_no_module_of_the_package_imports_itself_back() -> None:
    # A cycle (planner/admission.py and planner/queue_order.py once) means two modules are
    # one concern split in the wrong place: the types both need go in a module of their own.
    modules = {_module_of(path): path for path in SOURCES if path.is_relative_to(PACKAGE)}
    graph = {
        # A package and its own modules are one unit: its __init__ re-exports them.
        name: {
            imported
            for imported in _module_level_imports(path)
            if imported in modules
            and not (name + ".").startswith(imported + ".")
            and not imported.startswith(name + ".")
        }
        for name, path in modules.items()
    }
    cycles = sorted(
        (a, b) for a, targets in graph.items() for b in targets if a < b and a in graph.get(b, set())
    )
    assert cycles == []
