"""No import circle inside trainers/, between its modules or between its folders (algorithms/,
learner/, backends/ each counted as one): every import of a trainers module, at module level,
inside a function or under TYPE_CHECKING, is an edge, and the graph must sort topologically."""

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
           for p in (ROOT / "trainers").rglob("*.py")}


def imported_modules(path: Path) -> set[str]:
    """The trainers modules ``path`` imports (``from trainers.learner import attention`` names
    the module ``trainers.learner.attention``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            if name in MODULES:
                found.add(name)
                break  # the submodule when one is imported, else the module itself
    return found


def folder_of(module: str) -> str:
    """trainers.learner.model → trainers.learner; a top-level module is its own node."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_trainers_modules_import_each_other_without_a_circle():
    graph = {module: imported_modules(path) - {module} for module, path in MODULES.items()}
    # the parser sees imports in functions too (the backends are imported where chosen)
    assert {"trainers.config", "trainers.backends.embedded"} <= graph["trainers.loop"]
    graphlib.TopologicalSorter(graph).prepare()  # CycleError names the circle


def test_trainers_folders_import_each_other_without_a_circle():
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        graph.setdefault(folder_of(module), set()).update(
            folder_of(m) for m in imported_modules(path) if folder_of(m) != folder_of(module))
    graphlib.TopologicalSorter(graph).prepare()
