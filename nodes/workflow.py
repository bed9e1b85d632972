"""The workflow roles as LangGraph nodes (QR, RA, DS, AG, QDS, QDP) and the state they share.

A compiled workflow is one round on one target query: ``WorkflowState`` carries the inputs, what
the roles write, and bookkeeping. Each node factory takes the node's name in its compiled graph
(used as the call's node path) and returns an async node reading the state and the run context.
"""

from __future__ import annotations

import operator
from typing import Annotated, Awaitable, Callable, TypedDict

from langgraph.runtime import Runtime

from nodes.call import call_role
from nodes.context import RunContext, run_context
from nodes.retrieval import retrieve
from nodes.roles.base import Observation, Role
from nodes.roles.jade import AG, DS, QDP, QDS, QR
from stores.documents import Document


def merge_documents(existing: list[Document] | None, new: list[Document] | None) -> list[Document]:
    """Union by document id, first occurrence wins: the join of parallel retrieval branches."""
    merged = list(existing or [])
    seen = {doc.id for doc in merged}
    for doc in new or []:
        if doc.id not in seen:
            seen.add(doc.id)
            merged.append(doc)
    return merged


class WorkflowState(TypedDict, total=False):
    """The state the workflow nodes read and write: one round on one target query. Extend it
    (``class MyState(WorkflowState, total=False): ...``) for a graph of your own."""

    # inputs
    task_id: str
    round: int
    question: str                     # the target query this round works on
    known: list[tuple[str, str]]      # Select(s_t): solved sub-questions the roles may see
    max_items: int                    # decomposition limit
    # intra-round context, written by the roles
    query: str                        # current search query (QR rewrites it)
    documents: Annotated[list[Document], merge_documents]
    selected: list[Document]          # DS's choice; AG reads it when present
    answer: str
    subquestions: list[str]
    # bookkeeping
    executed: Annotated[list[str], operator.add]  # node names in completion order (RA included)


class BranchOutput(TypedDict, total=False):
    """What a parallel branch hands to the join: its documents and bookkeeping, never its query."""

    documents: Annotated[list[Document], merge_documents]
    executed: Annotated[list[str], operator.add]


Node = Callable[[WorkflowState, Runtime[RunContext]], Awaitable[dict]]


def _observation(state: WorkflowState, **extra) -> Observation:
    return Observation(query=state["question"], known=tuple(map(tuple, state.get("known", ()))),
                       max_items=state.get("max_items", 4), **extra)


async def _call(role: Role, state: WorkflowState, runtime: Runtime[RunContext], node_name: str,
                observation: Observation):
    # a graph that sets no ids (a bare invoke, or a Studio run of a user's graph) runs as the
    # root task's first round
    task_id, turn = state.get("task_id", "0"), state.get("round", 1)
    return await call_role(run_context(runtime), role, observation, task_id=task_id, turn=turn,
                           node_path=f"{task_id}/{node_name}")


def query_rewriter(node_name: str) -> Node:
    """A QR node: rewrites the question into a search query (``query``)."""
    async def qr(state: WorkflowState, runtime: Runtime[RunContext]) -> dict:
        outcome = await _call(QR, state, runtime, node_name, _observation(state))
        return {"query": outcome.action, "executed": [node_name]}
    return qr


def retriever(node_name: str) -> Node:
    """An RA node (a tool, no LLM): retrieves top-k for ``query`` (else the question) and merges
    them into ``documents``."""
    async def ra(state: WorkflowState, runtime: Runtime[RunContext]) -> dict:
        found = await retrieve(run_context(runtime), state.get("query") or state["question"])
        return {"documents": found, "executed": [node_name]}
    return ra


def document_selector(node_name: str) -> Node:
    """A DS node: keeps the relevant ``documents`` as ``selected``."""
    async def ds(state: WorkflowState, runtime: Runtime[RunContext]) -> dict:
        documents = tuple(state.get("documents", ()))
        outcome = await _call(DS, state, runtime, node_name, _observation(state, documents=documents))
        return {"selected": [documents[i] for i in outcome.action], "executed": [node_name]}
    return ds


def answer_generator(node_name: str) -> Node:
    """An AG node: answers from ``selected`` (else ``documents``) into ``answer``."""
    async def ag(state: WorkflowState, runtime: Runtime[RunContext]) -> dict:
        documents = state["selected"] if "selected" in state else state.get("documents", [])
        observation = _observation(state, documents=tuple(documents))
        outcome = await _call(AG, state, runtime, node_name, observation)
        return {"answer": outcome.action, "executed": [node_name]}
    return ag


def decomposer(role: Role) -> Callable[[str], Node]:
    """A node factory for a decomposition role (QDS serial, QDP parallel): writes
    ``subquestions`` (empty when the decomposition failed)."""
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
