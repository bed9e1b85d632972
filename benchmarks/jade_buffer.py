"""A recorded training buffer for the update benchmarks: the offline model (SmolLM2-135M-Instruct)
samples JADE on the bundled questions, and every trained call becomes an ``Experience``."""

from __future__ import annotations

import asyncio

from ragteam.graphs.methods.jade import JadeReward, build_jade_graph
from ragteam.nodes.context import RunContext, Settings
from ragteam.nodes.policies.hf import HFPolicy
from ragteam.nodes.policies.offline_model import ensure_offline_model
from ragteam.nodes.team import Team
from ragteam.nodes.written import WrittenReplies
from ragteam.stores.datasets import read_dataset
from ragteam.stores.demo import DEMO_QUESTIONS, demo_retriever
from ragteam.trainers.experience import to_experiences
from ragteam.trainers.learner.model import load_lm
from ragteam.trainers.rollout import collect


def record_jade_buffer(n_questions: int, samples: int = 1, fixed_workflow: str = "", temperature: float = 0.7):
    """(lm, tokenizer, experiences) of ``samples`` JADE runs on each of the first questions (with
    ``fixed_workflow``, every plan is written as that workflow, as the warm-started planner chose)."""
    lm, tokenizer = load_lm(str(ensure_offline_model()))
    ctx = RunContext(Team(HFPolicy(lm, tokenizer)), demo_retriever(),
                     Settings(temperature=temperature, written=WrittenReplies.fixed(fixed_workflow, "RA,AG")))
    examples = read_dataset(DEMO_QUESTIONS).examples[:n_questions]
    rollouts, _ = asyncio.run(collect(build_jade_graph(), examples, ctx, samples=samples, concurrency=8, tag="b"))
    items = []
    for r in rollouts:
        outcome = JadeReward()(r.result, r.example)
        items += to_experiences(r.result.transitions, outcome.rewards, group=r.example.id,
                                local=outcome.local_rewards)
    return lm, tokenizer, items
