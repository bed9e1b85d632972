"""What a run of a graph produced (``RunResult``) and what each planner round did
(``RoundRecord``): the records ``graphs.run`` returns, the graph contract checks and the reward
schemes score."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ragteam.nodes.tracing import Transition


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
