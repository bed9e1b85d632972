"""Methods by name: what the CLI, LangGraph Studio, the evaluator and the trainers look up.

A ``Method`` is one record: how to build its graph, the graph it trains on, its reward schemes,
and which roles learn or stay frozen. Three kinds of method are known by name:

- built-in: each module of this package registers its records on import, and ``methods()``
  imports every module here, so a new built-in method is one new module; nothing else names it;
- installed: a package declares ``[project.entry-points."ragteam.methods"] NAME = "pkg.mod:OBJ"``
  (``OBJ`` a ``Method``, a graph, or a function returning one);
- a user's own graph, named where a method name is accepted as ``path/to/file.py:NAME`` or
  ``package.module:NAME`` (``graphs.methods.references``).

Every graph is checked against the graph contract (``graphs.contract``) when it is registered or
loaded, so a broken graph is refused with the missing key named, never mid-run.
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points
from typing import Callable

from langgraph.pregel import Pregel

from ragteam.graphs.methods.method import BUILT_IN, Method
from ragteam.graphs.methods.rewards import RewardScheme

ENTRY_POINT_GROUP = "ragteam.methods"


_METHODS: dict[str, Method] = {}
_BROKEN: dict[str, str] = {}   # entry points that failed to load: name -> why
_discovered = False


def register(method: Method) -> Method:
    """Make ``method`` known by its name (to ``get_method``, the CLI, Studio and the trainers).
    Its graphs are built once here, so one that breaks the graph contract is refused now."""
    if method.name in _METHODS and _METHODS[method.name] is not method:
        raise ValueError(f"a method named {method.name!r} is already registered")
    method.graph()
    if method.build_for_training is not None:
        method.training_graph()
    _METHODS[method.name] = method
    return method


def methods() -> dict[str, Method]:
    """Every known method, built-in ones first, in registration order (each module of this
    package is imported once, which registers its methods), then installed packages' ones."""
    global _discovered
    if not _discovered:
        _discovered = True
        package = importlib.import_module("ragteam.graphs.methods")
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"ragteam.graphs.methods.{info.name}")
        _load_entry_points()
    return dict(_METHODS)


def broken_methods() -> dict[str, str]:
    """Installed methods that could not be loaded, with the reason (``ragteam graphs`` shows them)."""
    methods()
    return dict(_BROKEN)


def _load_entry_points() -> None:
    from ragteam.graphs.methods.references import method_from

    for point in entry_points(group=ENTRY_POINT_GROUP):
        package = point.dist.name if point.dist else point.value
        try:
            register(method_from(point.load(), point.name, f"entry point of {package}"))
        except Exception as error:  # one broken package must not hide every other method
            _BROKEN[point.name] = f"entry point {point.value!r} of {package}: {type(error).__name__}: {error}"


def get_method(name: str) -> Method:
    """The method a name or a reference (``file.py:NAME``, ``package.module:NAME``) names; a
    ``ValueError`` that says what is wrong otherwise (no traceback-worthy surprise)."""
    from ragteam.graphs.methods.references import is_reference, load_reference

    known = methods()
    if name in known:
        return known[name]
    if name in _BROKEN:
        raise ValueError(f"graph {name!r} cannot be loaded: {_BROKEN[name]}")
    if is_reference(name):
        return load_reference(name)
    raise ValueError(f"unknown graph {name!r}; known graphs: {', '.join(known)} "
                     "(or your own, as path/to/file.py:NAME or package.module:NAME)")


def build_graph(name: str) -> Pregel:
    """The compiled graph of a method name or reference, checked against the graph contract."""
    return get_method(name).graph()


def reward_schemes(method: Method | None = None) -> dict[str, Callable[..., RewardScheme]]:
    """Every reward scheme a registered method defines, plus ``method``'s own (a user's graph
    may bring schemes of its own), by name."""
    found = {scheme: factory for m in methods().values() for scheme, factory in m.rewards.items()}
    return {**found, **(method.rewards if method is not None else {})}


def make_reward(name: str, method: Method | None = None, **options) -> RewardScheme:
    """The reward scheme ``name`` (see ``reward_schemes``) with ``options``; a ``ValueError``
    naming an unknown scheme or option."""
    schemes = reward_schemes(method)
    if name not in schemes:
        raise ValueError(f"unknown reward scheme {name!r}; known: {', '.join(schemes)}")
    try:
        return schemes[name](**options)
    except TypeError as error:  # an option the scheme does not have
        raise ValueError(f"reward scheme {name!r}: {error}") from None
