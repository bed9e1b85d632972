"""LangGraph node functions for the workflow roles (QR, RA, DS, AG, QDS, QDP).

Each factory takes the node's name in its compiled graph (used as the trace's node path) and
returns an async node that reads ``WorkflowState`` and the run's ``RunContext``.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from langgraph.runtime import Runtime

from graphs.workflow_state import WorkflowState
from graphs.run_context import run_context
from nodes.context import RunContext
from nodes.invoke import call_role
from nodes.retrieval import retrieve
from nodes.roles import AG, DS, QDP, QDS, QR, Observation, Role

Node = Callable[[WorkflowState, Runtime[RunContext]], Awaitable[dict]]


def _observation(state: WorkflowState, **extra) -> Observation:
    return Observation(query=state["question"], known=tuple(map(tuple, state.get("known", ()))),
                       max_items=state.get("max_items", 4), **extra)


async def _call(role: Role, state: WorkflowState, runtime: Runtime[RunContext], node_name: str,
                observation: Observation):
    return await call_role(run_context(runtime), role, observation, task_id=state["task_id"],
                           round_=state["round"], node_path=f"{state['task_id']}/{node_name}")


def query_rewriter(node_name: str) -> Node:
    async def qr(state: WorkflowState, runtime: Runtime[RunContext]) -> dict:
        outcome = await _call(QR, state, runtime, node_name, _observation(state))
        return {"query": outcome.action, "executed": [node_name]}
    return qr


def retriever(node_name: str) -> Node:
    async def ra(state: WorkflowState, runtime: Runtime[RunContext]) -> dict:
        found = await retrieve(run_context(runtime), state.get("query") or state["question"])
        return {"documents": found, "executed": [node_name]}
    return ra


def document_selector(node_name: str) -> Node:
    async def ds(state: WorkflowState, runtime: Runtime[RunContext]) -> dict:
        documents = tuple(state.get("documents", ()))
        outcome = await _call(DS, state, runtime, node_name, _observation(state, documents=documents))
        return {"selected": [documents[i] for i in outcome.action], "executed": [node_name]}
    return ds


def answer_generator(node_name: str) -> Node:
    async def ag(state: WorkflowState, runtime: Runtime[RunContext]) -> dict:
        documents = state["selected"] if "selected" in state else state.get("documents", [])
        observation = _observation(state, documents=tuple(documents))
        outcome = await _call(AG, state, runtime, node_name, observation)
        return {"answer": outcome.action, "executed": [node_name]}
    return ag


def decomposer(role: Role) -> Callable[[str], Node]:
    def factory(node_name: str) -> Node:
        async def qd(state: WorkflowState, runtime: Runtime[RunContext]) -> dict:
            outcome = await _call(role, state, runtime, node_name, _observation(state))
            # an empty list means the decomposition failed; the JADE loop then solves directly
            return {"subquestions": outcome.action, "executed": [node_name]}
        return qd
    return factory


NODE_FACTORIES: dict[str, Callable[[str], Node]] = {
    "QR": query_rewriter, "RA": retriever, "DS": document_selector, "AG": answer_generator,
    "QDS": decomposer(QDS), "QDP": decomposer(QDP),
}
