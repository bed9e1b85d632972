"""The workflow roles as LangGraph nodes (QR, RA, DS, AG, QDS, QDP) and the state they share.

A compiled workflow is one round on one target query: ``WorkflowState`` carries the inputs, what
the roles write, and bookkeeping. Each node factory takes the node's name in its compiled graph
(used as the call's node path) and returns an async node reading the state and the run context.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Awaitable, Callable

from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from ragteam.nodes.call import call_role
from ragteam.nodes.context import RunContext, arun_context
from ragteam.nodes.retrieval import retrieve
from ragteam.nodes.roles.base import Observation, Role
from ragteam.nodes.roles.jade import AG, DS, QDP, QDS, QR, serial_decomposer
from ragteam.stores.documents import Document


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
    (``class MyState(WorkflowState, total=False): ...``) for a graph of your own. A state of your
    own that does not extend it should be a ``typing_extensions.TypedDict``: on Python < 3.12,
    LangGraph Studio shows no input form for a graph whose state is a ``typing.TypedDict``.

    Every key is optional (``total=False``). A write replaces a key's value, except for the two
    keys listed with a reducer (LangGraph's ``Annotated`` reducers, which ``help()`` does not
    show): those merge every write, so parallel branches add to them instead of colliding.

    Inputs:

    - ``question`` (str): the target query of this round. The only key a run passes in.
    - ``task_id`` (str): the task the calls work on, as the trace records it; default ``"0"``
      (the root task).
    - ``round`` (int): the round (turn) the calls are traced under; default 1.
    - ``known`` (list[tuple[str, str]]): solved sub-questions and their answers, shown to the
      roles that see them (``Role.sees_known``); default none.
    - ``max_items`` (int): how many sub-questions a decomposition may write; default 4.
    - ``variants`` (list[str]): the question once per name of an earlier answer that lists several
      (``Settings.serial.fan_out``); RA then searches each and interleaves their rankings; default none.

    Written by the nodes:

    - ``query`` (str): the current search query; QR writes it, RA searches it (else the question).
    - ``documents`` (list[Document]), reducer ``merge_documents``: union by document id, first
      occurrence first — RA appends, and parallel retrieval branches join without duplicates.
    - ``selected`` (list[Document]): DS's choice; AG answers from it when present, else from
      ``documents``.
    - ``answer`` (str): AG's answer, the graph's answer.
    - ``subquestions`` (list[str]): QDS/QDP's decomposition (empty when it failed).
    - ``executed`` (list[str]), reducer ``operator.add``: node names in completion order (RA
      included), appended by every node.

    Not keys of this state, but the graph contract's outputs (``graphs.contract``): a graph that
    loops adds them to its own state and writes them; one that does not gets the defaults.

    - ``turns`` (int): the graph's loop count — how many times its loop body ran, e.g. a 3-hop
      retrieve-and-answer loop reports ``turns=3``; default 1 (ran once).
    - ``stop_reason`` (str): why the run ended, one short word (``ragteam run`` prints it, each
      eval record keeps it), e.g. ``"answered"`` (the default), ``"verified"``, ``"max_turns"``
      when the loop ran out of budget.
    """

    # inputs
    task_id: str
    round: int
    question: str                     # the target query this round works on
    known: list[tuple[str, str]]      # Select(s_t): solved sub-questions the roles may see
    max_items: int                    # decomposition limit
    variants: list[str]               # the question once per name of an earlier list answer (fan_out)
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
                observation: Observation, reply: str | None = None):
    # a graph that sets no ids (a bare invoke, or a Studio run of a user's graph) runs as the
    # root task's first round
    task_id, turn = state.get("task_id", "0"), state.get("round", 1)
    return await call_role(await arun_context(runtime), role, observation, task_id=task_id, turn=turn,
                           node_path=f"{task_id}/{node_name}", reply=reply)


def query_rewriter(node_name: str) -> Node:
    """A QR node: rewrites the question into a search query (``query``)."""
    async def qr(state: WorkflowState, runtime: Runtime[RunContext]) -> dict:
        outcome = await _call(QR, state, runtime, node_name, _observation(state))
        return {"query": outcome.action, "executed": [node_name]}
    return qr


def retriever(node_name: str) -> Node:
    """An RA node (a tool, no LLM): retrieves top-k for ``query`` (else the question, or each of
    its ``variants`` when it fans out over several names) and merges them into ``documents``."""
    async def ra(state: WorkflowState, runtime: Runtime[RunContext]) -> dict:
        ctx = await arun_context(runtime)
        queries = [state["query"]] if state.get("query") else state.get("variants") or [state["question"]]
        ranked = await asyncio.gather(*(retrieve(ctx, query) for query in queries))
        # rank by rank across the queries, so each name's best document comes before anyone's second
        interleaved = [docs[rank] for rank in range(max(map(len, ranked))) for docs in ranked if rank < len(docs)]
        return {"documents": merge_documents([], interleaved), "executed": [node_name]}
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
            settings = (await arun_context(runtime)).settings
            # the serial decomposer may be its variant with another example chain (exploration)
            shown = serial_decomposer(settings.serial.example_steps) if role is QDS else role
            outcome = await _call(shown, state, runtime, node_name, _observation(state))
            # an empty list means the decomposition failed; the JADE loop then solves directly
            return {"subquestions": outcome.action, "executed": [node_name]}
        return qd
    return factory


NODE_FACTORIES: dict[str, Callable[[str], Node]] = {
    "QR": query_rewriter, "RA": retriever, "DS": document_selector, "AG": answer_generator,
    "QDS": decomposer(QDS), "QDP": decomposer(QDP),
}
