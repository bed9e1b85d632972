"""Methods by name: what the CLI, LangGraph Studio, the evaluator and the trainers look up.

A ``Method`` is one record in its own module (``graphs/methods/<name>.py``): how to build its
graph, the graph it trains on, its reward schemes, and which roles learn or stay frozen. Modules
register their records on import and ``methods()`` imports every module of this package, so a
new method is one new module here; nothing else names it.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable, Mapping

from graphs.methods.rewards import RewardScheme


@dataclass(frozen=True)
class Method:
    name: str
    summary: str                                    # one line: what the method is
    build: Callable[[], object]                     # the compiled inference graph
    # reward scheme the trainer uses by default; "jade" = outcome F1 on the last call plus a
    # format penalty per call, which fits any method that names nothing more specific
    default_reward: str = "jade"
    rewards: Mapping[str, Callable[..., RewardScheme]] = field(default_factory=dict)  # defined here
    build_for_training: Callable[[], object] | None = None  # default: the inference graph
    frozen_roles: tuple[str, ...] = ()              # roles played by a frozen copy when training
    sft_roles: tuple[str, ...] = ()                 # roles SFT on good traces trains by default

    def training_graph(self):
        return (self.build_for_training or self.build)()


_METHODS: dict[str, Method] = {}
_discovered = False


def register(method: Method) -> Method:
    if method.name in _METHODS and _METHODS[method.name] is not method:
        raise ValueError(f"a method named {method.name!r} is already registered")
    _METHODS[method.name] = method
    return method


def methods() -> dict[str, Method]:
    """Every registered method, in registration order (each module of this package is imported
    once, which registers its methods)."""
    global _discovered
    if not _discovered:
        package = importlib.import_module("graphs.methods")
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"graphs.methods.{info.name}")
        _discovered = True
    return dict(_METHODS)


def get_method(name: str) -> Method:
    known = methods()
    if name not in known:
        raise ValueError(f"unknown graph {name!r}; known graphs: {', '.join(sorted(known))}")
    return known[name]


def build_graph(name: str):
    return get_method(name).build()


def reward_schemes() -> dict[str, Callable[..., RewardScheme]]:
    return {scheme: factory for m in methods().values() for scheme, factory in m.rewards.items()}


def make_reward(name: str, **options) -> RewardScheme:
    schemes = reward_schemes()
    if name not in schemes:
        raise ValueError(f"unknown reward scheme {name!r}; known: {', '.join(schemes)}")
    try:
        return schemes[name](**options)
    except TypeError as error:  # an option the scheme does not have
        raise ValueError(f"reward scheme {name!r}: {error}") from None
