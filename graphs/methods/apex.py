"""APEX-Searcher as a LangGraph graph: plan once, then execute each sub-question in order.

    plan ─► next ─► check ─answer─────────────────────────────► sub_answer ─► next … ─► final
                      └─retrieve─► query ─► search ─► (continue? ─continue─► query …)
                                                         └─stop / no new documents / max hops─┘

``next`` resolves ``#n`` references against earlier sub-answers. Within a sub-question the
execution agent checks whether the knowledge base already suffices, otherwise searches for up to
``max_hops`` hops with a query history (so it does not repeat itself) and de-duplication of
documents already read in this run. Each sub-answer joins the knowledge base; the final agent
answers the original question from it.

Training (APEX's two stages): RL on the planning agent with the set-equivalence plan reward
(``SeprReward``; the questions need gold decompositions), and SFT of the execution agent on its
own successful traces (``trainers/sft_graph.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from ragteam.graphs.eval.metrics import score
from ragteam.graphs.methods.registry import Method, register
from ragteam.graphs.methods.rewards import RewardOutcome
from ragteam.graphs.run import RunResult
from ragteam.nodes.call import call_role
from ragteam.nodes.context import ContextSpec, RunContext, arun_context
from ragteam.nodes.parsing import resolve_references
from ragteam.nodes.retrieval import retrieve
from ragteam.nodes.roles.apex import (APEX_CONTINUE, APEX_FINAL, APEX_PLAN, APEX_QUERY, APEX_SUB_ANSWER,
                              APEX_SUFFICIENT, ExecutionObservation)
from ragteam.stores.datasets import QAExample
from ragteam.stores.documents import Document


class ApexState(TypedDict, total=False):
    question: str
    plan: list[str]
    knowledge: list[tuple[str, str]]   # the knowledge base: (resolved sub-question, sub-answer)
    subquestion: int                   # index of the sub-question in progress (1-based)
    turns: int                         # = sub-questions started, the run's generic loop count
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
    index = state.get("subquestion", 0)
    return await call_role(await arun_context(runtime), role, _observation(state, question),
                           task_id=f"q{index}" if index else "0", turn=index,
                           node_path=f"apex/{role.name}")


async def plan(state: ApexState, runtime: Runtime[RunContext]) -> dict:
    outcome = await _ask(APEX_PLAN, state, runtime, state["question"])
    return {"plan": outcome.action, "knowledge": [], "subquestion": 0, "turns": 0, "seen": []}


def next_subquestion(state: ApexState) -> dict:
    index = state["subquestion"]  # sub-questions done so far
    if index >= len(state["plan"]):
        return {"current": ""}
    answers = [answer for _, answer in state["knowledge"]]
    current = resolve_references(state["plan"][index],
                                 lambda n: answers[n - 1] if 1 <= n <= len(answers) else None)
    return {"subquestion": index + 1, "turns": index + 1, "current": current,
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
    found = await retrieve(await arun_context(runtime), state["tried"][-1], seen=seen)
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
    outcome = await call_role(await arun_context(runtime), APEX_FINAL, observation, task_id="0",
                              turn=state["subquestion"] + 1, node_path="apex/apex_final")
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


# -- training --------------------------------------------------------------------------------------
def sepr(predicted: Sequence[str], gold: Sequence[str], similarity: Callable, threshold: float) -> float:
    """Set-equivalence plan reward: F1 over sub-questions matched one-to-one (Hungarian
    assignment on 1 − cosine similarity), counting only pairs at or above ``threshold``."""
    from scipy.optimize import linear_sum_assignment

    if not predicted or not gold:
        return 0.0
    sims = similarity(list(predicted), list(gold))  # [len(predicted), len(gold)]
    rows, cols = linear_sum_assignment([[1.0 - s for s in row] for row in sims])
    matched = sum(1 for r, c in zip(rows, cols) if sims[r][c] >= threshold)
    if matched == 0:
        return 0.0
    precision, recall = matched / len(predicted), matched / len(gold)
    return 2 * precision * recall / (precision + recall)


def sentence_similarity(left: list[str], right: list[str]) -> list[list[float]]:
    """Cosine similarities with the packaged MiniLM sentence-transformer."""
    from ragteam.stores.embeddings import load_embedder

    embedder = load_embedder()
    a, b = embedder.embed_queries(left), embedder.embed_queries(right)
    return [[sum(x * y for x, y in zip(u, v)) for v in b] for u in a]


def gold_decomposition(example: QAExample) -> list[str]:
    gold = example.metadata.get("decomposition")
    if not gold:
        raise ValueError(f"example {example.id!r} has no gold decomposition: the sepr reward needs "
                         "a 'decomposition' list (or MuSiQue's 'question_decomposition') per question")
    return list(gold)


@dataclass
class SeprReward:
    """APEX's RL stage: the plan call earns its SEPR against the gold decomposition, or
    −``format_penalty`` when the plan broke its format."""

    threshold: float = 0.7
    format_penalty: float = 1.0
    similarity: Callable = sentence_similarity
    name: str = "sepr"
    train_roles: frozenset[str] | None = frozenset({APEX_PLAN.name})

    def __call__(self, result: RunResult, example: QAExample) -> RewardOutcome:
        gold = gold_decomposition(example)
        rewards = [0.0] * len(result.transitions)
        plan_scores = []
        for i, t in enumerate(result.transitions):
            if t.role == APEX_PLAN.name:
                rewards[i] = (sepr(t.action or [], gold, self.similarity, self.threshold)
                              if t.format_ok else -self.format_penalty)
                plan_scores.append(rewards[i])
        scores = score(result.answer, example.golds, example.metric)
        scores["sepr"] = sum(plan_scores) / len(plan_scores) if plan_scores else 0.0
        return RewardOutcome(rewards, scores)


APEX = register(Method(
    "apex", "APEX-Searcher: plan with #n references → per sub-question sufficiency check, query "
    "history, de-duplicated multi-hop retrieval, continue/stop → knowledge base → final answer",
    build=build_apex_graph, default_reward="sepr", rewards={"sepr": SeprReward},
    sft_roles=tuple(r.name for r in (APEX_SUFFICIENT, APEX_QUERY, APEX_CONTINUE, APEX_SUB_ANSWER,
                                     APEX_FINAL))))
