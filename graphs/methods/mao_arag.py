"""MAO-ARAG: the same plan → execute → update loop and executor set as JADE, but only the planner
learns. Executors are bound to a frozen policy (the paper uses an API model such as GPT-4o-mini;
here any ``Policy``, e.g. ``ChatModelPolicy`` around a langchain chat model or a second local
model; when training, a frozen copy of the initial weights). The planner's reward is its answer's
F1 minus token, turn and retrieval costs (``MaoAragReward``)."""

from __future__ import annotations

from dataclasses import dataclass

from ragteam.graphs.eval.metrics import score
from ragteam.graphs.methods.jade import PLANNER_WORKFLOWS, build_jade_graph
from ragteam.graphs.methods.registry import Method, register
from ragteam.graphs.methods.rewards import RewardOutcome
from ragteam.graphs.run import RunResult
from ragteam.nodes.policies.protocol import Policy
from ragteam.nodes.team import Team
from ragteam.nodes.topology import Topology, parse_topology
from ragteam.stores.datasets import QAExample

EXECUTOR_ROLES = ("QR", "QDS", "QDP", "DS", "AG", "AS")


def build_mao_arag_graph():
    return build_jade_graph(name="mao_arag")


def mao_arag_team(planner: Policy, executors: Policy) -> Team:
    """The planner on the learner's policy, every executor role on ``executors``, frozen."""
    return Team.with_frozen(planner, executors, EXECUTOR_ROLES)


# MAO-ARAG Appendix A: mean token price of each executor per query; a workflow's token cost is
# its executors' sum scaled so the dearest workflow (QR, DS, AG, AS = 6.02e-4) costs 1.
TOKEN_PRICE = {"QDS": 0.91e-4, "QDP": 1.00e-4, "QR": 0.88e-4, "DS": 2.08e-4, "AG": 1.58e-4,
               "AS": 1.48e-4}
MAX_PRICE = 6.02e-4
TURN_COST_PER_SUBQUESTION = 0.25  # 4 sub-questions at most → at most 1


def turn_cost(topology: Topology, n_subquestions: int) -> float:
    """Token cost + turn cost + search indicator of one planner turn (each in [0, 1]).

    The paper's text says QDS adds one round per sub-question and QDP one round in all; its
    Table 4 lists the two the other way round. The text's reasoning is followed here."""
    roles = topology.roles()
    token = min(sum(TOKEN_PRICE.get(r, 0.0) for r in roles) / MAX_PRICE, 1.0)
    if topology.decomposition == "QDS":
        turn = min(TURN_COST_PER_SUBQUESTION * max(n_subquestions, 1), 1.0)
    elif topology.decomposition == "QDP":
        turn = TURN_COST_PER_SUBQUESTION
    else:
        turn = 0.0
    search = 1.0 if "RA" in roles else 0.0
    return token + turn + search


@dataclass
class MaoAragReward:
    """Each planner turn: F1 − α·cost(turn), or F1 − ``format_penalty`` for an unusable plan
    (MAO-ARAG Eq. 3–6). Its Eq. 9 KL term is the trainer's ``kl_coef`` with ``kl_in: reward``."""

    alpha: float = 0.1
    format_penalty: float = 1.0
    name: str = "mao_arag"
    train_roles: frozenset[str] | None = frozenset({"planner"})

    def __call__(self, result: RunResult, example: QAExample) -> RewardOutcome:
        scores = score(result.answer, example.golds, example.metric)
        transitions = result.transitions
        rewards = [0.0] * len(transitions)
        for i, t in enumerate(transitions):
            if t.role != "planner":
                continue
            topology = parse_topology(t.action) if t.format_ok else None
            if not isinstance(topology, Topology):
                rewards[i] = scores["f1"] - self.format_penalty
                continue
            subquestions = next((len(d.action or []) for d in transitions
                                 if d.role == topology.decomposition and d.task_id == t.task_id
                                 and d.turn == t.turn), 0)
            rewards[i] = scores["f1"] - self.alpha * turn_cost(topology, subquestions)
        return RewardOutcome(rewards, scores)


MAO_ARAG = register(Method(
    "mao_arag", "MAO-ARAG: JADE's loop with only the planner trained; executors on a frozen policy",
    build=build_mao_arag_graph, default_reward="mao_arag", rewards={"mao_arag": MaoAragReward},
    frozen_roles=EXECUTOR_ROLES, workflow_choice=PLANNER_WORKFLOWS))
