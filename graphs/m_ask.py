"""M-ASK as a LangGraph graph.

    plan ─► search ─<search>─► retrieve ─► summarize ─► update ─► (probe) ─► search …
               └──<end> or max turns──► answer ─► END

The planning agent writes an initial trajectory and predicted answer from parametric knowledge;
each turn the search agent either asks one query or ends; retrieved documents are condensed to
evidence; the update agent overwrites a step (Update) or appends one (Add). With
``answer_every_turn`` (training rollouts) the answer agent also runs after each turn, so the
turn-level ΔF1 rewards can be computed; at inference it runs once at the end. Turns are bounded
by ``Settings.max_rounds`` (the paper's max iterations).
"""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from graphs.run_context import ContextSpec, run_context
from nodes.context import RunContext
from nodes.invoke import call_role
from nodes.mask_roles import (MASK_ANSWER, MASK_PLAN, MASK_SEARCH, MASK_SUMMARY, MASK_UPDATE,
                              KnowledgeObservation)
from nodes.retrieval import retrieve
from stores.documents import Document


class MaskState(TypedDict, total=False):
    question: str
    trajectory: list[tuple[str, str]]
    predicted: str
    history: list[tuple[str, str]]       # (query, evidence) of every search so far
    query: str                           # this turn's sub-query
    documents: list[Document]
    evidence: str
    round: int                           # completed search turns
    turn_answers: Annotated[list[str], operator.add]  # answer after each turn (training probes)
    ended: bool
    answer: str
    stop_reason: str


def _observation(state: MaskState, **extra) -> KnowledgeObservation:
    return KnowledgeObservation(
        question=state["question"], trajectory=tuple(map(tuple, state.get("trajectory", []))),
        predicted=state.get("predicted", ""), history=tuple(map(tuple, state.get("history", []))),
        **extra)


async def _ask(role, state: MaskState, runtime: Runtime[RunContext], round_: int, **extra):
    return await call_role(run_context(runtime), role, _observation(state, **extra), task_id="0",
                           round_=round_, node_path=f"m_ask/{role.name}")


async def plan(state: MaskState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(MASK_PLAN, state, runtime, 0)
    return {"trajectory": [tuple(step) for step in outcome.action["trajectory"]],
            "predicted": outcome.action["predicted"], "history": [], "round": 0}


async def search(state: MaskState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(MASK_SEARCH, state, runtime, state["round"] + 1)
    if outcome.action.get("end"):
        return {"ended": True, "stop_reason": "end"}
    return {"query": outcome.action["search"]}


def after_search(state: MaskState, runtime: Runtime[RunContext]) -> str:
    return "answer" if state.get("ended") else "retrieve"


async def retrieve_node(state: MaskState, runtime: Runtime[RunContext]) -> dict:
    return {"documents": await retrieve(run_context(runtime), state["query"])}


async def summarize(state: MaskState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(MASK_SUMMARY, state, runtime, state["round"] + 1, query=state["query"],
                         documents=tuple(state.get("documents", [])))
    return {"evidence": outcome.action}


async def update(state: MaskState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(MASK_UPDATE, state, runtime, state["round"] + 1, query=state["query"],
                         evidence=state["evidence"])
    trajectory = list(state.get("trajectory", []))
    step = (state["query"], state["evidence"])
    if outcome.action["op"] == "update":
        trajectory[outcome.action["index"]] = step
    else:
        trajectory.append(step)
    return {"trajectory": trajectory, "history": state.get("history", []) + [step],
            "round": state["round"] + 1}


def make_probe():
    async def probe(state: MaskState, runtime: Runtime[RunContext]) -> dict:
        outcome = await _ask(MASK_ANSWER, state, runtime, state["round"])
        return {"turn_answers": [outcome.action], "predicted": outcome.action}
    return probe


def make_continue(budget_exit: str):
    def next_turn(state: MaskState, runtime: Runtime[RunContext]) -> str:
        return "answer" if state["round"] >= run_context(runtime).settings.max_rounds else budget_exit
    return next_turn


async def answer(state: MaskState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(MASK_ANSWER, state, runtime, state.get("round", 0) + 1)
    return {"answer": outcome.action, "stop_reason": state.get("stop_reason") or "max_turns"}


def build_m_ask_graph(answer_every_turn: bool = False, name: str = "m_ask"):
    builder = StateGraph(MaskState, context_schema=ContextSpec)
    builder.add_node("plan", plan)
    builder.add_node("search", search)
    builder.add_node("retrieve", retrieve_node)
    builder.add_node("summarize", summarize)
    builder.add_node("update", update)
    builder.add_node("answer", answer)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", make_continue("search"), ["search", "answer"])
    builder.add_conditional_edges("search", after_search, ["retrieve", "answer"])
    builder.add_edge("retrieve", "summarize")
    builder.add_edge("summarize", "update")
    if answer_every_turn:
        builder.add_node("probe", make_probe())
        builder.add_edge("update", "probe")
        builder.add_conditional_edges("probe", make_continue("search"), ["search", "answer"])
    else:
        builder.add_conditional_edges("update", make_continue("search"), ["search", "answer"])
    builder.add_edge("answer", END)
    return builder.compile(name=name)
