"""Imports keep their shape: floors, no circles, ragteam's packages under one name only, every
package folder in the wheel.

- Floors: stores/ ← nodes/ ← graphs/ ← trainers/; a module imports only from its own floor or
  the ones below it (a file format in stores/ that needs a role's parser belongs to nodes/).
- No import circle between ragteam's modules, nor between trainers/' folders (algorithms/,
  learner/, backends/ each counted as one): every import of a ragteam module, at module level,
  inside a function or under TYPE_CHECKING, is an edge, and the graph must sort topologically.
- ragteam's packages are imported under one name only, ``ragteam.graphs`` … ``ragteam.trainers``:
  a module imported as ``nodes.x`` too would run twice, with two copies of every registry.
- The wheel lists every package folder (its packages are renamed, so none is found by itself).
"""

import ast
import graphlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("graphs", "nodes", "stores", "trainers")
MODULES = {"ragteam." + ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
           for package in PACKAGES for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts}
SKIP = {".git", ".venv", ".cache", "runs", "build", "dist", "__pycache__"}


def imported_modules(path: Path) -> set[str]:
    """The ragteam modules ``path`` imports (``from ragteam.trainers.learner import attention``
    names the module ``ragteam.trainers.learner.attention``)."""
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
    """ragteam.trainers.learner.model → ragteam.trainers.learner; a top-level module is its own node."""
    return ".".join(module.split(".")[:3])


def import_graph() -> dict[str, set[str]]:
    return {module: imported_modules(path) - {module} for module, path in MODULES.items()}


def test_ragteams_modules_import_each_other_without_a_circle():
    graph = import_graph()
    # the parser sees imports in functions too (the backends are imported where chosen)
    assert {"ragteam.trainers.config", "ragteam.trainers.backends.embedded"} <= graph["ragteam.trainers.loop"]
    graphlib.TopologicalSorter(graph).prepare()  # CycleError names the circle


def test_no_module_imports_from_a_floor_above_its_own():
    floor = {package: level for level, package in enumerate(("stores", "nodes", "graphs", "trainers"))}
    of = lambda module: floor[module.split(".")[1]]  # noqa: E731
    upward = sorted(f"{a} -> {b}" for a, targets in import_graph().items() for b in targets if of(b) > of(a))
    assert not upward, upward


def test_trainers_folders_import_each_other_without_a_circle():
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        if not module.startswith("ragteam.trainers"):
            continue
        graph.setdefault(folder_of(module), set()).update(
            folder_of(m) for m in imported_modules(path) if folder_of(m) != folder_of(module))
    graphlib.TopologicalSorter(graph).prepare()


def python_files():
    return [p for p in ROOT.rglob("*.py") if not SKIP & set(p.relative_to(ROOT).parts)]


def is_ours(name: str) -> bool:
    """Whether ``name`` (``nodes.context``, ``nodes``) is a module of ragteam's under its bare name."""
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return False
    return len(parts) == 1 or (ROOT / parts[0] / f"{parts[1]}.py").is_file() or (ROOT / parts[0] / parts[1]).is_dir()


def test_no_module_imports_the_bare_package_names():
    """An import statement, a lazy ``import_module`` or a ``mock.patch`` target that names one of
    the four packages without ``ragteam.`` in front is the old spelling of a ``ragteam.`` name."""
    found = []
    for path in python_files():
        where = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"\w+(\.\w+)+\.?(:\w+)?", node.value):
                names = [node.value.split(":")[0].rstrip(".")]
            else:
                continue
            found += [f"{where}:{node.lineno}: {name}" for name in names if is_ours(name)]
    assert not found, "import these as ragteam.<name>:\n" + "\n".join(found)


def test_a_checkout_imports_its_packages_under_ragteam_only():
    code = ("import sys, ragteam, ragteam.graphs.apps.cli, ragteam.graphs.methods as m; m.methods(); "
            "print(ragteam.nodes.__file__); "
            f"print(sorted(n for n in sys.modules if n.split('.')[0] in {PACKAGES!r}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    where, bare = done.stdout.splitlines()
    assert Path(where) == ROOT / "nodes" / "__init__.py"
    assert bare == "[]"


def test_the_wheel_lists_every_package_folder():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {"ragteam." + ".".join(p.parent.relative_to(ROOT).parts)
               for name in PACKAGES for p in (ROOT / name).rglob("__init__.py")}
    data = {"ragteam.stores.data", "ragteam.graphs.apps.templates"}  # folders of package data
    assert set(setuptools["packages"]) == {"ragteam", *folders, *data}
    assert set(setuptools["package-data"]) == data
    assert setuptools["package-dir"] == {f"ragteam.{name}": name for name in PACKAGES}


def test_the_trainer_scripts_import_no_numba():
    """A spawned vLLM worker re-imports the trainer's main module; vLLM's CPU kernel registration
    fails on llvmlite's wrappers in sys.modules (BM25 brings numba), so none may come with it."""
    code = ("import sys; import ragteam.trainers.ppo_graph, ragteam.trainers.sft_graph; "
            "print(sorted(m for m in ('numba', 'llvmlite') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
