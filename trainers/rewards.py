"""Reward schemes: a finished run (its transitions) and the gold answer → one reward per call.

Each scheme returns rewards aligned with ``result.transitions`` plus the run's scores for
logging. Schemes know which roles their paper trains (``train_roles``; None = every trainable
role) — MAO-ARAG trains the planner only, APEX's RL stage the planning agent only, QAgent the
search agent only.

- ``jade``: F1 − (α·min(T/Tmax, 1) + β·min(N_ret/Rmax, 1)) on the terminal call (shared), −1 on
  each call whose output broke its format (local) (JADE Eq. 6–8; Tmax = Rmax = 3 as in the paper).
- ``mao_arag``: each planner turn gets F1 − α·cost(turn) − format(turn) (MAO-ARAG Eq. 3–6);
  the KL term of its Eq. 9 is the trainer's ``kl_coef`` with ``kl_in: reward``.
- ``m_ask``: absolute F1 for the plan's and each answer's prediction; ΔF1 of the turn for that
  turn's search, summary and update calls; 0 for a search that ended the loop (M-ASK Eq. 2–3).
- ``sepr``: APEX's set-equivalence plan reward on the plan call.
- ``qagent``: EM(gold, generator answer) + 0.5·Hit (gold inside the gathered passages) on the
  agent's last call (QAgent Eq. 10, non-strict EM = gold contained in the answer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from graphs.metrics import normalize, score
from graphs.run import RunResult
from nodes.tracing import Transition
from stores.datasets import QAExample


@dataclass
class RewardOutcome:
    """Per-call rewards aligned with ``result.transitions``, in two streams: ``rewards`` are
    shared through the advantage estimator (GAE carries them back to earlier calls); ``local``
    rewards are added to their own call's advantage only — JADE's "immediate, non-transferable"
    format penalty. Under GAE with γ = 1 a penalty given as an ordinary reward would also charge
    the planner whose valid decomposition led to a later sub-planner's mistake."""

    rewards: list[float]
    scores: dict[str, float] = field(default_factory=dict)  # f1, em, ... of the run
    local: list[float] | None = None

    @property
    def local_rewards(self) -> list[float]:
        return self.local if self.local is not None else [0.0] * len(self.rewards)

    @property
    def total(self) -> float:
        return sum(self.rewards) + sum(self.local_rewards)


class RewardScheme(Protocol):
    name: str
    train_roles: frozenset[str] | None

    def __call__(self, result: RunResult, example: QAExample) -> RewardOutcome: ...


def _terminal_index(transitions: Sequence[Transition]) -> int:
    return max(range(len(transitions)), key=lambda i: (transitions[i].round, transitions[i].step))


def _format_penalties(transitions: Sequence[Transition], penalty: float) -> list[float]:
    return [0.0 if t.format_ok else -penalty for t in transitions]


@dataclass
class JadeReward:
    alpha: float = 0.05          # per normalized round
    beta: float = 0.05           # per normalized retrieval call
    max_rounds: int = 3
    max_retrievals: int = 3
    format_penalty: float = 1.0
    name: str = "jade"
    train_roles: frozenset[str] | None = None

    def __call__(self, result: RunResult, example: QAExample) -> RewardOutcome:
        scores = score(result.answer, example.golds)
        rounds, retrievals = result.costs.get("rounds", 0), result.costs.get("retrieval_calls", 0)
        cost = (self.alpha * min(rounds / self.max_rounds, 1.0)
                + self.beta * min(retrievals / self.max_retrievals, 1.0))
        rewards = [0.0] * len(result.transitions)
        if rewards:
            rewards[_terminal_index(result.transitions)] = scores["f1"] - cost
        return RewardOutcome(rewards, {**scores, "cost_penalty": cost},
                             local=_format_penalties(result.transitions, self.format_penalty))


# MAO-ARAG Appendix A: mean token price of each executor per query; a workflow's token cost is
# its executors' sum scaled so the dearest workflow (QR, DS, AG, AS = 6.02e-4) costs 1.
MAO_TOKEN_PRICE = {"QDS": 0.91e-4, "QDP": 1.00e-4, "QR": 0.88e-4, "DS": 2.08e-4, "AG": 1.58e-4,
                   "AS": 1.48e-4}
MAO_MAX_PRICE = 6.02e-4
MAO_TURN_COST_PER_SUBQUESTION = 0.25  # 4 sub-questions at most → at most 1


def mao_turn_cost(workflow: str, n_subquestions: int) -> float:
    """Token cost + turn cost + search indicator of one planner turn (each in [0, 1]).

    The paper's text says QDS adds one round per sub-question and QDP one round in all; its
    Table 4 lists the two the other way round. The text's reasoning is followed here."""
    roles = [r for r in re.split(r"[^A-Z]+", workflow.upper()) if r]
    token = min(sum(MAO_TOKEN_PRICE.get(r, 0.0) for r in roles) / MAO_MAX_PRICE, 1.0)
    if "QDS" in roles:
        turn = min(MAO_TURN_COST_PER_SUBQUESTION * max(n_subquestions, 1), 1.0)
    elif "QDP" in roles:
        turn = MAO_TURN_COST_PER_SUBQUESTION
    else:
        turn = 0.0
    search = 1.0 if "RA" in roles else 0.0
    return token + turn + search


@dataclass
class MaoAragReward:
    alpha: float = 0.1
    format_penalty: float = 1.0
    name: str = "mao_arag"
    train_roles: frozenset[str] | None = frozenset({"planner"})

    def __call__(self, result: RunResult, example: QAExample) -> RewardOutcome:
        scores = score(result.answer, example.golds)
        transitions = result.transitions
        rewards = [0.0] * len(transitions)
        for i, t in enumerate(transitions):
            if t.role != "planner":
                continue
            if not t.format_ok:
                rewards[i] = scores["f1"] - self.format_penalty
                continue
            subquestions = next((len(d.action or []) for d in transitions
                                 if d.role in ("QDS", "QDP") and d.task_id == t.task_id
                                 and d.round == t.round), 0)
            rewards[i] = scores["f1"] - self.alpha * mao_turn_cost(str(t.action), subquestions)
        return RewardOutcome(rewards, scores)


@dataclass
class MaskReward:
    name: str = "m_ask"
    train_roles: frozenset[str] | None = None

    def __call__(self, result: RunResult, example: QAExample) -> RewardOutcome:
        def f1(answer) -> float:
            return score(str(answer or ""), example.golds)["f1"]

        transitions = result.transitions
        rewards = [0.0] * len(transitions)
        answer_f1: dict[int, float] = {}   # round → F1 of the answer written after that turn
        for i, t in enumerate(transitions):
            if t.role == "mask_plan":
                answer_f1[0] = rewards[i] = f1((t.action or {}).get("predicted"))
            elif t.role == "mask_answer":
                rewards[i] = f1(t.action)
                answer_f1.setdefault(t.round, rewards[i])  # the probe comes before a final answer
        for i, t in enumerate(transitions):
            if t.role not in ("mask_search", "mask_summary", "mask_update"):
                continue
            if t.role == "mask_search" and (t.action or {}).get("end"):
                continue  # ending the loop earns nothing
            if t.round not in answer_f1:
                if t.role == "mask_search":
                    continue  # a search whose turn ran out of budget before its answer probe
                raise ValueError("M-ASK turn rewards need an answer after every turn: build the "
                                 "graph with build_m_ask_graph(answer_every_turn=True)")
            rewards[i] = answer_f1[t.round] - answer_f1.get(t.round - 1, 0.0)
        return RewardOutcome(rewards, score(result.answer, example.golds))


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
    from stores.embeddings import load_embedder

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
    threshold: float = 0.7
    format_penalty: float = 1.0
    similarity: Callable = sentence_similarity
    name: str = "sepr"
    train_roles: frozenset[str] | None = frozenset({"apex_plan"})

    def __call__(self, result: RunResult, example: QAExample) -> RewardOutcome:
        gold = gold_decomposition(example)
        rewards = [0.0] * len(result.transitions)
        plan_scores = []
        for i, t in enumerate(result.transitions):
            if t.role == "apex_plan":
                rewards[i] = (sepr(t.action or [], gold, self.similarity, self.threshold)
                              if t.format_ok else -self.format_penalty)
                plan_scores.append(rewards[i])
        scores = score(result.answer, example.golds)
        scores["sepr"] = sum(plan_scores) / len(plan_scores) if plan_scores else 0.0
        return RewardOutcome(rewards, scores)


_INFORMATION = re.compile(r"<information>(.*?)</information>", re.S)


def passages_hit(transitions: Sequence[Transition], golds: Sequence[str]) -> bool:
    """Whether a gold answer appears in any passage block the agent was shown."""
    seen = " ".join(block for t in transitions for block in _INFORMATION.findall(t.prompt_text))
    text = f" {normalize(seen)} "
    return any(normalize(g) and f" {normalize(g)} " in text for g in golds)


@dataclass
class QAgentReward:
    hit_weight: float = 0.5
    agent_role: str = "qagent"
    name: str = "qagent"
    train_roles: frozenset[str] | None = frozenset({"qagent"})

    def __call__(self, result: RunResult, example: QAExample) -> RewardOutcome:
        scores = score(result.answer, example.golds)
        hit = passages_hit(result.transitions, example.golds)
        rewards = [0.0] * len(result.transitions)
        agent_calls = [i for i, t in enumerate(result.transitions) if t.role == self.agent_role]
        if agent_calls:
            last = max(agent_calls, key=lambda i: (result.transitions[i].round, result.transitions[i].step))
            rewards[last] = scores["acc"] + self.hit_weight * float(hit)
        return RewardOutcome(rewards, {**scores, "hit": float(hit)})


SCHEMES: dict[str, Callable[..., RewardScheme]] = {
    "jade": JadeReward, "mao_arag": MaoAragReward, "m_ask": MaskReward, "sepr": SeprReward,
    "qagent": QAgentReward,
}
DEFAULT_SCHEME = {"jade": "jade", "mao_arag": "mao_arag", "m_ask": "m_ask", "apex": "sepr",
                  "qagent": "qagent", "qagent_submodule": "qagent"}


def make_reward(name: str, **options) -> RewardScheme:
    if name not in SCHEMES:
        raise ValueError(f"unknown reward scheme {name!r}; known: {', '.join(SCHEMES)}")
    try:
        return SCHEMES[name](**options)
    except TypeError as error:  # an option the scheme does not have
        raise ValueError(f"reward scheme {name!r}: {error}") from None
