"""APEX-Searcher as a LangGraph graph: plan once, then execute each sub-question in order.

    plan ─► next ─► check ─answer─────────────────────────────► sub_answer ─► next … ─► final
                      └─retrieve─► query ─► search ─► (continue? ─continue─► query …)
                                                         └─stop / no new documents / max hops─┘

``next`` resolves ``#n`` references against earlier sub-answers. Within a sub-question the
execution agent checks whether the knowledge base already suffices, otherwise searches for up to
``max_hops`` hops with a query history (so it does not repeat itself) and de-duplication of
documents already read in this run. Each sub-answer joins the knowledge base; the final agent
answers the original question from it.
"""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from graphs.run_context import ContextSpec, run_context
from nodes.apex_roles import (APEX_CONTINUE, APEX_FINAL, APEX_PLAN, APEX_QUERY, APEX_SUB_ANSWER,
                              APEX_SUFFICIENT, ExecutionObservation, resolve_placeholders)
from nodes.context import RunContext
from nodes.invoke import call_role
from nodes.retrieval import retrieve
from stores.documents import Document


class ApexState(TypedDict, total=False):
    question: str
    plan: list[str]
    knowledge: list[tuple[str, str]]   # the knowledge base: (resolved sub-question, sub-answer)
    round: int                         # index of the sub-question in progress (1-based)
    current: str                       # that sub-question, references resolved
    documents: list[Document]          # evidence for the current sub-question
    tried: list[str]                   # queries issued for it
    hop: int
    seen: list[str]                    # ids of every document read in this run
    new_documents: int                 # how many unseen documents the last hop found
    decision: str
    answer: str
    stop_reason: str


def _observation(state: ApexState, question: str | None = None) -> ExecutionObservation:
    return ExecutionObservation(
        question=question or state.get("current") or state["question"],
        knowledge=tuple(map(tuple, state.get("knowledge", []))),
        documents=tuple(state.get("documents", [])), tried=tuple(state.get("tried", [])))


async def _ask(role, state: ApexState, runtime: Runtime[RunContext], question: str | None = None):
    round_ = state.get("round", 0)
    return await call_role(run_context(runtime), role, _observation(state, question),
                           task_id=f"q{round_}" if round_ else "0", round_=round_,
                           node_path=f"apex/{role.name}")


async def plan(state: ApexState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(APEX_PLAN, state, runtime, state["question"])
    return {"plan": outcome.action, "knowledge": [], "round": 0, "seen": []}


def next_subquestion(state: ApexState) -> dict:
    index = state["round"]  # sub-questions done so far
    if index >= len(state["plan"]):
        return {"current": ""}
    answers = [answer for _, answer in state["knowledge"]]
    return {"round": index + 1, "current": resolve_placeholders(state["plan"][index], answers),
            "documents": [], "tried": [], "hop": 0}


def after_next(state: ApexState) -> str:
    return "check" if state["current"] else "final"


async def check(state: ApexState, runtime: Runtime[RunContext]) -> dict:
    if not state.get("knowledge"):  # nothing known yet: the check can only say "retrieve"
        return {"decision": "retrieve"}
    return {"decision": (await _ask(APEX_SUFFICIENT, state, runtime)).action}


async def query(state: ApexState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(APEX_QUERY, state, runtime)
    return {"tried": state.get("tried", []) + [outcome.action]}


async def search(state: ApexState, runtime: Runtime[RunContext]) -> dict:
    seen = set(state.get("seen", []))
    found = await retrieve(run_context(runtime), state["tried"][-1], seen=seen)
    return {"documents": state.get("documents", []) + found, "seen": sorted(seen),
            "hop": state["hop"] + 1, "new_documents": len(found)}


def make_after_search(max_hops: int):
    def after_search(state: ApexState) -> str:
        if state["new_documents"] == 0 or state["hop"] >= max_hops:
            return "sub_answer"
        return "should_continue"
    return after_search


async def should_continue(state: ApexState, runtime: Runtime[RunContext]) -> dict:
    return {"decision": (await _ask(APEX_CONTINUE, state, runtime)).action}


async def sub_answer(state: ApexState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(APEX_SUB_ANSWER, state, runtime)
    return {"knowledge": state["knowledge"] + [(state["current"], outcome.action)]}


async def final(state: ApexState, runtime: Runtime[RunContext]) -> dict:
    if len(state["plan"]) == 1:  # a one-step plan: its sub-answer is the answer
        return {"answer": state["knowledge"][0][1], "stop_reason": "solved"}
    observation = ExecutionObservation(question=state["question"],
                                       knowledge=tuple(map(tuple, state["knowledge"])))
    outcome = await call_role(run_context(runtime), APEX_FINAL, observation, task_id="0",
                              round_=state["round"] + 1, node_path="apex/apex_final")
    return {"answer": outcome.action, "stop_reason": "solved"}


def build_apex_graph(max_hops: int = 3, name: str = "apex"):
    builder = StateGraph(ApexState, context_schema=ContextSpec)
    for node, fn in [("plan", plan), ("next", next_subquestion), ("check", check), ("query", query),
                     ("search", search), ("should_continue", should_continue),
                     ("sub_answer", sub_answer), ("final", final)]:
        builder.add_node(node, fn)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "next")
    builder.add_conditional_edges("next", after_next, ["check", "final"])
    builder.add_conditional_edges("check", lambda s: "sub_answer" if s["decision"] == "answer" else "query",
                                  ["sub_answer", "query"])
    builder.add_edge("query", "search")
    builder.add_conditional_edges("search", make_after_search(max_hops), ["sub_answer", "should_continue"])
    builder.add_conditional_edges("should_continue",
                                  lambda s: "query" if s["decision"] == "continue" else "sub_answer",
                                  ["query", "sub_answer"])
    builder.add_edge("sub_answer", "next")
    builder.add_edge("final", END)
    return builder.compile(name=name)
