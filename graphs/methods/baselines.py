"""Fixed-workflow baselines: one topology, run once on the question, no planner.

- ``llm_only``        AG                closed book
- ``vanilla_rag``     RA,AG             retrieve top-k (default 5), then answer
- ``static_pipeline`` QR,RA,DS,AG       the fixed rewrite → retrieve → select → generate graph of
                                        RRR / BGM / MMOA-RAG
(The monolithic Search-R1 loop lives in ``graphs.methods.search_loop``.)

The compiled workflow is the graph's only real node, so Studio shows its roles as a subgraph.
"""

from __future__ import annotations

from functools import partial

from langgraph.graph import END, START, StateGraph

from ragteam.graphs.compiler import compile_topology
from ragteam.graphs.methods.registry import Method, register
from ragteam.nodes.context import ContextSpec
from ragteam.nodes.topology import Topology, parse_topology
from ragteam.nodes.workflow import WorkflowState

BASELINES = {  # name: (workflow, what it is)
    "llm_only": ("AG", "baseline: answer closed-book (AG)"),
    "vanilla_rag": ("RA,AG", "baseline: retrieve top-k, then answer (RA,AG)"),
    "static_pipeline": ("QR,RA,DS,AG", "baseline: the fixed rewrite → retrieve → select → answer "
                                       "pipeline of RRR / BGM / MMOA-RAG (QR,RA,DS,AG)"),
}


class BaselineState(WorkflowState, total=False):
    stop_reason: str
    turns: int


def _prepare(state: BaselineState) -> dict:
    return {"task_id": "0", "round": 1, "known": [], "max_items": 4}


def _finish(state: BaselineState) -> dict:
    """The workflow ran once: the run is over, whatever it answered."""
    return {"stop_reason": "solved", "turns": 1}


def build_fixed_workflow_graph(workflow: str, name: str):
    topology = parse_topology(workflow)
    if not isinstance(topology, Topology) or topology.decomposition:
        raise ValueError(f"a fixed baseline needs a valid solving workflow, got {workflow!r}")
    builder = StateGraph(BaselineState, context_schema=ContextSpec)
    builder.add_node("prepare", _prepare)
    builder.add_node("workflow", compile_topology(topology))
    builder.add_node("finish", _finish)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "workflow")
    builder.add_edge("workflow", "finish")
    builder.add_edge("finish", END)
    return builder.compile(name=name)


for _name, (_workflow, _summary) in BASELINES.items():
    register(Method(_name, _summary, build=partial(build_fixed_workflow_graph, _workflow, _name)))
