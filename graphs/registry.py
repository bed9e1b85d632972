"""Method graphs by name: what the CLI, LangGraph Studio and the trainer look up."""

from __future__ import annotations

from typing import Callable

from graphs.jade import build_jade_graph

GRAPH_BUILDERS: dict[str, Callable] = {
    "jade": build_jade_graph,
}


def build_graph(name: str):
    try:
        return GRAPH_BUILDERS[name]()
    except KeyError:
        known = ", ".join(sorted(GRAPH_BUILDERS))
        raise ValueError(f"unknown graph {name!r}; known graphs: {known}") from None
