"""Fixed-workflow baselines: one topology, run once on the question, no planner.

- ``llm_only``        AG                closed book
- ``vanilla_rag``     RA,AG             retrieve top-k (default 5), then answer
- ``static_pipeline`` QR,RA,DS,AG       the fixed rewrite → retrieve → select → generate graph of
                                        RRR / BGM / MMOA-RAG
(The monolithic Search-R1 loop lives in ``graphs.search_loop``.)

The compiled workflow is the graph's only real node, so Studio shows its roles as a subgraph.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from graphs.compiler import compile_topology
from graphs.run_context import ContextSpec
from graphs.topology import Topology, parse_topology
from graphs.workflow_state import WorkflowState

BASELINE_WORKFLOWS = {"llm_only": "AG", "vanilla_rag": "RA,AG", "static_pipeline": "QR,RA,DS,AG"}


def _prepare(state: WorkflowState) -> dict:
    return {"task_id": "0", "round": 1, "known": [], "max_items": 4}


def build_fixed_workflow_graph(workflow: str, name: str):
    topology = parse_topology(workflow)
    if not isinstance(topology, Topology) or topology.decomposition:
        raise ValueError(f"a fixed baseline needs a valid solving workflow, got {workflow!r}")
    builder = StateGraph(WorkflowState, context_schema=ContextSpec)
    builder.add_node("prepare", _prepare)
    builder.add_node("workflow", compile_topology(topology))
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "workflow")
    builder.add_edge("workflow", END)
    return builder.compile(name=name)
