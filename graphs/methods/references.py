"""A user's own graph, named where a method name is accepted: ``path/to/file.py:NAME`` or
``package.module:NAME``.

``NAME`` is an attribute of that file or module holding a ``Method``, a compiled LangGraph graph,
a ``StateGraph``, or a function of no arguments that returns one of them. A graph (not a
``Method``) becomes a method named after the graph (``builder.compile(name=...)``), else after the
attribute, with the default reward and no frozen roles; declare more with a ``Method``.

Every error is one ``ValueError`` line naming the reference and what is wrong with it, whatever
the user's code raised on the way (``SystemExit`` and ``KeyboardInterrupt`` at import included: a
module that exits or is interrupted while ragteam loads it is a broken reference, not a shutdown).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from ragteam.graphs.contract import GraphContractError
from ragteam.graphs.methods.method import Method
from ragteam.nodes.user_modules import import_user_module, raised
from ragteam.stores.owned import is_label

_LOADED: dict[str, Method] = {}
DEFAULT_GRAPH_NAME = "LangGraph"  # what LangGraph names a graph compiled without a name


def is_reference(text: str) -> bool:
    """Whether ``text`` names a user's graph rather than a registered method."""
    return ":" in text or text.endswith(".py")


# ragteam's packages before they moved under ``ragteam.``: a run saved then may name its graph so
OLD_PACKAGES = ("graphs", "nodes", "stores", "trainers")


def renamed_reference(reference: str) -> str | None:
    """``ragteam.graphs.apps.studio:NAME`` for ``graphs.apps.studio:NAME`` (a module of ragteam's
    under its old name); None for any other reference. Importing the old name would load a
    second copy of ragteam's modules, registries included."""
    where, _, attribute = reference.rpartition(":")
    if attribute and not where.endswith(".py") and where.split(".")[0] in OLD_PACKAGES:
        # only a module ragteam has: a project's own `graphs` package keeps its references
        if _is_module(f"ragteam.{where}"):
            return f"ragteam.{where}:{attribute}"
    return None


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a parent that is not a package
        return False


def canonical_reference(reference: str) -> str:
    """A file reference with an absolute path (so other processes — Ray workers, a resumed run —
    find the same file); one of ragteam's modules under its current name; a module reference or
    a method name otherwise unchanged."""
    where, _, attribute = reference.rpartition(":")
    if where.endswith(".py") and attribute:
        return f"{Path(where).resolve()}:{attribute}"
    return renamed_reference(reference) or reference


def load_reference(reference: str) -> Method:
    """The method ``reference`` names (imported once per process)."""
    key = canonical_reference(reference)
    if (renamed := renamed_reference(reference)) is not None:
        if key not in _LOADED:
            print(f"ragteam: graph {reference!r} is now spelled {renamed!r}", file=sys.stderr)
        reference = renamed
    if key not in _LOADED:
        where, _, attribute = reference.rpartition(":")
        if not where or not attribute:
            raise ValueError(f"graph reference {reference!r}: write it as path/to/file.py:NAME or "
                             "package.module:NAME")
        module = import_user_module(reference, where)
        if not hasattr(module, attribute):
            raise ValueError(f"graph reference {reference!r}: {where} has no attribute {attribute!r}"
                             + _candidates(module))
        source = f"file {Path(where).resolve()}" if where.endswith(".py") else f"module {where}"
        _LOADED[key] = method_from(getattr(module, attribute), attribute, source, reference,
                                   summary=_first_line(module.__doc__))
    return _LOADED[key]


def method_from(value: Any, name: str, source: str, reference: str | None = None,
                summary: str = "") -> Method:
    """A ``Method`` from what a reference or an entry point points at, checked against the
    graph contract."""
    label = reference or name
    if callable(value) and not isinstance(value, (Method, Pregel, StateGraph, type)):
        summary = _first_line(value.__doc__) or summary
        try:
            value = guarded(label, "its factory", value)
        except ValueError as error:
            if isinstance(error.__cause__, TypeError):
                raise ValueError(f"graph {label!r}: a graph factory must take no arguments "
                                 f"({error.__cause__})") from None
            raise
    if isinstance(value, Method):
        method = guarded(label, "its Method", lambda: replace(
            value, source=source, name=name if reference is None else value.name))
    elif isinstance(value, (Pregel, StateGraph)):
        graph = guarded(label, "compiling it", value.compile) if isinstance(value, StateGraph) else value
        # the graph's own name when it is a plain name (it names the eval folder), else the attribute's
        graph_name = graph.name if is_label(graph.name) and graph.name != DEFAULT_GRAPH_NAME else name
        method = Method(graph_name if reference else name, summary or "(no summary)",
                        build=lambda: graph, source=source)
    else:
        raise ValueError(f"graph {label!r} is a {type(value).__name__}, not a graph: point it at a "
                         "compiled LangGraph graph, a StateGraph, a ragteam Method, or a function "
                         "returning one")
    try:
        guarded(label, "building its graph", method.graph)
        if method.build_for_training is not None:
            guarded(label, "building its training graph", method.training_graph)
    except ValueError as error:
        if isinstance(error.__cause__, GraphContractError):
            raise ValueError(f"graph {label!r} breaks the graph contract: {error.__cause__}") from None
        raise
    return method


def guarded(label: str, what: str, call: Callable[[], Any]) -> Any:
    """``call()``, with anything the user's code raises — an exit or an interrupt included —
    turned into one ``ValueError`` line naming the reference (the cause kept for callers)."""
    try:
        return call()
    except BaseException as error:  # noqa: BLE001 — user code may raise SystemExit/KeyboardInterrupt
        raise ValueError(f"graph {label!r}: {what} raised {raised(error)}") from error


def _candidates(module) -> str:
    found = [name for name, value in vars(module).items()
             if not name.startswith("_") and isinstance(value, (Method, Pregel, StateGraph))]
    return f" (graphs there: {', '.join(found)})" if found else " (it defines no graph)"


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0].strip() if (text or "").strip() else ""
