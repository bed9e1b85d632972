"""Method graphs by name: what the CLI, LangGraph Studio and the trainer look up."""

from __future__ import annotations

from functools import partial
from typing import Callable

from graphs.apex import build_apex_graph
from graphs.baselines import BASELINE_WORKFLOWS, build_fixed_workflow_graph
from graphs.jade import build_jade_graph
from graphs.m_ask import build_m_ask_graph
from graphs.mao_arag import build_mao_arag_graph
from graphs.search_loop import build_qagent_graph, build_search_r1_graph

GRAPH_BUILDERS: dict[str, Callable] = {
    "jade": build_jade_graph,
    "mao_arag": build_mao_arag_graph,
    "m_ask": build_m_ask_graph,
    "apex": build_apex_graph,
    "qagent": build_qagent_graph,
    "qagent_submodule": partial(build_qagent_graph, submodule=True),
    "search_r1": build_search_r1_graph,
    **{name: partial(build_fixed_workflow_graph, workflow, name)
       for name, workflow in BASELINE_WORKFLOWS.items()},
}


def build_graph(name: str):
    try:
        return GRAPH_BUILDERS[name]()
    except KeyError:
        known = ", ".join(sorted(GRAPH_BUILDERS))
        raise ValueError(f"unknown graph {name!r}; known graphs: {known}") from None
