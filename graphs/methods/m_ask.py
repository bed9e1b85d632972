"""M-ASK as a LangGraph graph.

    plan ─► search ─<search>─► retrieve ─► summarize ─► update ─► (probe) ─► search …
               └──<end> or max turns──► answer ─► END

The planning agent writes an initial trajectory and predicted answer from parametric knowledge;
each turn the search agent either asks one query or ends; retrieved documents are condensed to
evidence; the update agent overwrites a step (Update) or appends one (Add). With
``answer_every_turn`` (training rollouts) the answer agent also runs after each turn, so the
turn-level ΔF1 rewards can be computed; at inference it runs once at the end. Turns are bounded
by ``Settings.max_rounds`` (the paper's max iterations); a run that uses them all still ends with
the answer agent's answer.

Training: every agent learns on one shared model (``MAskReward``), on the probing graph.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from ragteam.graphs.eval.metrics import score
from ragteam.graphs.methods.registry import Method, register
from ragteam.graphs.methods.rewards import RewardOutcome
from ragteam.graphs.run import RunResult
from ragteam.nodes.call import call_role
from ragteam.nodes.context import ContextSpec, RunContext, arun_context, run_context
from ragteam.nodes.retrieval import retrieve
from ragteam.nodes.roles.m_ask import (M_ASK_ANSWER, M_ASK_PLAN, M_ASK_SEARCH, M_ASK_SUMMARY, M_ASK_UPDATE,
                               KnowledgeObservation)
from ragteam.stores.datasets import QAExample
from ragteam.stores.documents import Document


class MAskState(TypedDict, total=False):
    question: str
    trajectory: list[tuple[str, str]]
    predicted: str
    history: list[tuple[str, str]]       # (query, evidence) of every search so far
    query: str                           # this turn's sub-query
    documents: list[Document]
    evidence: str
    turn: int                            # completed search turns
    turns: int                           # = turn, the run's generic loop count
    turn_answers: Annotated[list[str], operator.add]  # answer after each turn (training probes)
    ended: bool
    answer: str
    stop_reason: str


def _observation(state: MAskState, **extra) -> KnowledgeObservation:
    return KnowledgeObservation(
        question=state["question"], trajectory=tuple(map(tuple, state.get("trajectory", []))),
        predicted=state.get("predicted", ""), history=tuple(map(tuple, state.get("history", []))),
        **extra)


async def _ask(role, state: MAskState, runtime: Runtime[RunContext], turn: int, **extra):
    return await call_role(await arun_context(runtime), role, _observation(state, **extra), task_id="0",
                           turn=turn, node_path=f"m_ask/{role.name}")


async def plan(state: MAskState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(M_ASK_PLAN, state, runtime, 0)
    return {"trajectory": [tuple(step) for step in outcome.action["trajectory"]],
            "predicted": outcome.action["predicted"], "history": [], "turn": 0, "turns": 0}


async def search(state: MAskState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(M_ASK_SEARCH, state, runtime, state["turn"] + 1)
    if outcome.action.get("end"):
        return {"ended": True, "stop_reason": "end"}
    return {"query": outcome.action["search"]}


def after_search(state: MAskState, runtime: Runtime[RunContext]) -> str:
    return "answer" if state.get("ended") else "retrieve"


async def retrieve_node(state: MAskState, runtime: Runtime[RunContext]) -> dict:
    return {"documents": await retrieve(await arun_context(runtime), state["query"])}


async def summarize(state: MAskState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(M_ASK_SUMMARY, state, runtime, state["turn"] + 1, query=state["query"],
                         documents=tuple(state.get("documents", [])))
    return {"evidence": outcome.action}


async def update(state: MAskState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(M_ASK_UPDATE, state, runtime, state["turn"] + 1, query=state["query"],
                         evidence=state["evidence"])
    trajectory = list(state.get("trajectory", []))
    step = (state["query"], state["evidence"])
    if outcome.action["op"] == "update":
        trajectory[outcome.action["index"]] = step
    else:
        trajectory.append(step)
    return {"trajectory": trajectory, "history": state.get("history", []) + [step],
            "turn": state["turn"] + 1, "turns": state["turn"] + 1}


def make_probe():
    async def probe(state: MAskState, runtime: Runtime[RunContext]) -> dict:
        outcome = await _ask(M_ASK_ANSWER, state, runtime, state["turn"])
        return {"turn_answers": [outcome.action], "predicted": outcome.action}
    return probe


def make_continue(budget_exit: str):
    def next_turn(state: MAskState, runtime: Runtime[RunContext]) -> str:
        return "answer" if state["turn"] >= run_context(runtime).settings.max_rounds else budget_exit
    return next_turn


async def answer(state: MAskState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(M_ASK_ANSWER, state, runtime, state.get("turn", 0) + 1)
    return {"answer": outcome.action, "stop_reason": state.get("stop_reason") or "max_turns"}


def build_m_ask_graph(answer_every_turn: bool = False, name: str = "m_ask"):
    builder = StateGraph(MAskState, context_schema=ContextSpec)
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


# -- training --------------------------------------------------------------------------------------
@dataclass
class MAskReward:
    """M-ASK Eq. 2–3: absolute F1 for the plan's and each answer's prediction; the turn's ΔF1
    (answer after the turn − answer before it) for its search, summary and update calls; 0 for a
    search that ended the loop. Needs the probing graph (an answer after every turn)."""

    name: str = "m_ask"
    train_roles: frozenset[str] | None = None

    def __call__(self, result: RunResult, example: QAExample) -> RewardOutcome:
        def f1(answer) -> float:
            return score(str(answer or ""), example.golds, example.metric)["f1"]

        transitions = result.transitions
        rewards = [0.0] * len(transitions)
        answer_f1: dict[int, float] = {}   # turn → F1 of the answer written after that turn
        for i, t in enumerate(transitions):
            if t.role == M_ASK_PLAN.name:
                answer_f1[0] = rewards[i] = f1((t.action or {}).get("predicted"))
            elif t.role == M_ASK_ANSWER.name:
                rewards[i] = f1(t.action)
                answer_f1.setdefault(t.turn, rewards[i])  # the probe comes before a final answer
        turn_roles = (M_ASK_SEARCH.name, M_ASK_SUMMARY.name, M_ASK_UPDATE.name)
        for i, t in enumerate(transitions):
            if t.role not in turn_roles:
                continue
            if t.role == M_ASK_SEARCH.name and (t.action or {}).get("end"):
                continue  # ending the loop earns nothing
            if t.turn not in answer_f1:
                if t.role == M_ASK_SEARCH.name:
                    continue  # a search whose turn ran out of budget before its answer probe
                raise ValueError("M-ASK turn rewards need an answer after every turn: build the "
                                 "graph with build_m_ask_graph(answer_every_turn=True)")
            rewards[i] = answer_f1[t.turn] - answer_f1.get(t.turn - 1, 0.0)
        return RewardOutcome(rewards, score(result.answer, example.golds, example.metric))


M_ASK = register(Method(
    "m_ask", "M-ASK: planning → (search → retrieve → summary → Update/Add) loop → answer",
    build=build_m_ask_graph, build_for_training=lambda: build_m_ask_graph(answer_every_turn=True),
    default_reward="m_ask", rewards={"m_ask": MAskReward}))
