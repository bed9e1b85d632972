"""Everything a graph run needs besides its state: passed as LangGraph's run context."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from nodes.team import Team
from nodes.tracing import Tracer
from stores.retriever import Retriever


@dataclass(frozen=True)
class Settings:
    """Budgets and knobs of a run (JADE defaults where the paper gives them)."""

    top_k: int = 5                 # documents per retrieval
    max_rounds: int = 6            # plan/execute rounds before the run must summarize
    max_depth: int = 1             # how deep sub-questions may themselves be decomposed (root = 0)
    max_subquestions: int = 4      # per decomposition (the JADE prompts' limit)
    temperature: float = 0.0       # 0 = greedy; > 0 samples (training rollouts)
    fallback_workflow: str = "RA,AG"  # what runs when the planner's output is unusable ("" = none)
    few_shot: bool = True          # send each role's demonstration turns (off: instructions only)


@dataclass
class RunContext:
    team: Team
    retriever: Retriever | None
    settings: Settings = field(default_factory=Settings)
    tracer: Tracer = field(default_factory=lambda: Tracer(run_id=uuid.uuid4().hex[:12]))

    def for_new_run(self, run_id: str | None = None) -> "RunContext":
        """Same team, retriever and settings; a fresh tracer (one per question)."""
        return replace(self, tracer=Tracer(run_id=run_id or uuid.uuid4().hex[:12]))
