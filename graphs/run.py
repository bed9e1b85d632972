"""Running a graph on questions: one run per question, many concurrently.

Any graph that keeps the graph contract runs here (``graphs.contract``): a built-in method's, or
a user's own, compiled or not; ``arun`` adapts it once and checks it before the first node runs.
Each run gets its own ``RunContext`` copy (a fresh tracer), so transitions of concurrent runs
never mix; their model calls still meet in the shared policy's request coalescer.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from graphs.contract import declared_outputs, ragteam_graph
from nodes.context import RunContext
from nodes.tracing import Transition, run_costs
from stores.text import clean_text


@dataclass
class RoundRecord:
    """One target handled in a planner round (JADE, MAO-ARAG): which workflow ran on which
    (sub-)question, and what came of it."""

    round: int
    task_id: str
    question: str
    workflow: str                  # canonical topology; "AS" composes; "(none)" when nothing ran
    executed: list[str] = field(default_factory=list)  # node names in completion order
    outcome: str = ""              # the answer, or "N serial sub-questions"
    planner_ok: bool = True        # False: the planner's output was unusable; the fallback ran
    planner_violation: str = ""
    fallback: str = ""             # what ran after a decomposition that gave no sub-questions

    @property
    def label(self) -> str:
        """The workflow, marked when it was the fallback for an unusable plan."""
        return self.workflow + ("" if self.planner_ok else " (fallback)")


@dataclass
class RunResult:
    """What one run of a graph on one question produced: the answer, why it stopped, what each
    planner round did, its costs, every LLM call as a transition, and the graph's declared
    extra outputs."""

    question: str
    answer: str
    stop_reason: str               # solved, answered, end, round_budget, max_turns, …
    rounds: list[RoundRecord]      # planner methods only
    tasks: list[dict]              # JADE's task tree (planner methods only)
    costs: dict[str, float]        # turns, llm_calls, retrieval_calls, tokens, violations, wall time
    transitions: list[Transition] = field(default_factory=list)
    run_id: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)  # the graph's declared extra outputs

    @property
    def topologies(self) -> list[str]:
        """The workflow each planner round ran (empty for graphs without a planner)."""
        return [record.workflow for record in self.rounds]


async def arun(graph, question: str, ctx: RunContext, run_id: str | None = None) -> RunResult:
    """Run ``graph`` (a compiled LangGraph graph or a ``StateGraph`` keeping the graph contract)
    on ``question`` with a fresh tracer; ``run_id`` names the run in its transitions. A blank
    question is a ``ValueError`` (there is nothing to answer); lone surrogates become U+FFFD."""
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"a question must be non-empty text, got {question!r}")
    question = clean_text(question)
    graph = ragteam_graph(graph)
    run_ctx = ctx.for_new_run(run_id)
    started = time.perf_counter()
    # Every graph bounds its own loops (rounds, turns, hops); the super-step limit is a safety net.
    state = await graph.ainvoke({"question": question}, context=run_ctx, config={"recursion_limit": 500})
    costs = run_costs(run_ctx.tracer)  # the tracer is the one source of cost counters
    costs["turns"] = state.get("turns", 0)  # each method's loop count (see Transition.turn)
    costs["wall_time_s"] = time.perf_counter() - started
    return RunResult(question=question, answer=state.get("answer", ""),
                     stop_reason=state.get("stop_reason", ""), rounds=state.get("rounds", []),
                     tasks=state.get("tasks", []), costs=costs,
                     transitions=run_ctx.tracer.transitions, run_id=run_ctx.tracer.run_id,
                     outputs={key: state.get(key) for key in declared_outputs(graph)})


async def arun_many(graph, questions: Sequence[str], ctx: RunContext) -> list[RunResult]:
    """Run ``graph`` on every question concurrently (their model calls are batched together)."""
    return list(await asyncio.gather(*(arun(graph, q, ctx) for q in questions)))


def run(graph, question: str, ctx: RunContext) -> RunResult:
    """Run ``graph`` on one question from synchronous code (see ``arun``)."""
    return asyncio.run(arun(graph, question, ctx))
