"""Topology -> compiled LangGraph workflow.

A sequence becomes a chain of edges. A parallel group becomes a ``Send`` fan-out to one
branch subgraph per path; every branch edges into the next step, which LangGraph runs once
after all branches of the super-step finish, with their documents merged by the reducer.
Compiled graphs hold no run state (that arrives as input and context), so they are cached by
their topology (a frozen, canonical value): planners repeat themselves.
"""

from __future__ import annotations

from functools import lru_cache

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send

from ragteam.nodes.context import ContextSpec
from ragteam.nodes.topology import Parallel, Topology
from ragteam.nodes.workflow import NODE_FACTORIES, BranchOutput, WorkflowState


@lru_cache(maxsize=512)
def compile_topology(topology: Topology) -> CompiledStateGraph:
    """``topology`` comes from ``parse_topology``, which only returns valid ones."""
    builder = StateGraph(WorkflowState, context_schema=ContextSpec)
    previous: list[str] = [START]
    for index, step in enumerate(topology.steps):
        if isinstance(step, Parallel):
            previous = _add_group(builder, index, step, previous)
        else:
            builder.add_node(step, NODE_FACTORIES[step](step))
            for source in previous:
                builder.add_edge(source, step)
            previous = [step]
    for source in previous:
        builder.add_edge(source, END)
    return builder.compile(name=f"workflow[{topology}]")


def _add_group(builder: StateGraph, index: int, group: Parallel, previous: list[str]) -> list[str]:
    names = [f"group{index}_branch{b}" for b in range(len(group.branches))]
    for name, branch in zip(names, group.branches):
        builder.add_node(name, _compile_branch(name, branch))

    def fan_out(state: WorkflowState) -> list[Send]:
        # Each branch starts from the shared inputs with empty bookkeeping of its own.
        shared = {k: v for k, v in state.items() if k not in ("documents", "executed")}
        return [Send(name, {**shared, "executed": []}) for name in names]

    if len(previous) != 1:  # two groups in a row: a join node keeps the fan-out single-sourced
        join = f"join{index}"
        builder.add_node(join, lambda state: {})
        for source in previous:
            builder.add_edge(source, join)
        previous = [join]
    builder.add_conditional_edges(previous[0], fan_out, names)
    return names


@lru_cache(maxsize=512)
def _compile_branch(name: str, roles: tuple[str, ...]) -> CompiledStateGraph:
    builder = StateGraph(WorkflowState, context_schema=ContextSpec, output_schema=BranchOutput)
    previous = START
    for role in roles:
        builder.add_node(role, NODE_FACTORIES[role](f"{name}/{role}"))
        builder.add_edge(previous, role)
        previous = role
    builder.add_edge(previous, END)
    return builder.compile(name=name)

