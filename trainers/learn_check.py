"""The learning gate: does PPO teach the planner which workflow pays, where the answer is known?

    python trainers/learn_check.py            # the gate and its control; exit 1 if either fails
    make learn-check                          # the same, then the tests that show it can fail

The setting (``stores.routing_world``): one-hop questions, which one retrieval answers, and two-
and three-hop ones, whose later articles no retrieval on the question can reach. The executors
are competent rules (``nodes.policies.world_rules``), frozen as MAO-ARAG's are; the planner is the
packaged SmolLM2-135M, the only thing trained, choosing between ``RA,AG`` and ``QDS`` (its menu,
``Settings.planning.choices``: its likelihood of each reply decides, so no format needs teaching; an
optional warm start teaches it on every workflow equally, blind to the question). PPO on one
world, greedy plans on another world's questions before and after (``GateSettings``: the
configuration and why).

The gate passes when, after PPO, the planner decomposes ≥ 90% of the held-out multi-hop questions
and answers ≥ 90% of the one-hop ones with one retrieval (``RA,AG``: a decomposition solves them
too, dearer), and the held-out reward rose (paired 95% bootstrap interval above 0). The control
(``--control``) trains against a retriever of unrelated articles: nothing pays, so the planner
must move to the cheapest workflow it may answer on ≥ 90% of the questions.

A gate that cannot fail checks nothing: tests/test_learn_check.py runs it with learning rate 0
and with advantages shuffled across groups, and both must fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[1]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

WORKFLOWS = ("AG", "RA,AG", "QDS")  # cheapest first: what the warm start teaches without a menu
SHARE = 0.9                          # the routing the gate asks for
# every planner prompt opens with the same ~245-token instruction, computed once per packed row
# (trainers.learner.batches): a step's calls fit one forward, counted here at full prompt length
TOKENS_PER_PASS = 32768
WARM_MINIBATCH = 12


@dataclass(frozen=True)
class GateSettings:
    """One gate run. The defaults are the gate's (runs 45–46, 63–64, 69–76, docs/results/learning_gate.md):
    the planner chooses between ``RA,AG`` and ``QDS`` (its menu), every question of the training
    world writes both each step (nothing sampled: the exact expected gradient of the choice,
    ``written_replies: menu``), the part of each step's push the questions share is removed
    unless they all agree on it (``batch_baseline: 1``, ``keep_unanimous``), plain SGD in ten
    half-size steps (lr 0.01 over 3 steps passed on one seed of four: its larger steps swing the
    preference every question shares)."""

    control: bool = False           # train and check against unrelated articles
    steps: int = 10
    questions_per_step: int = 48    # every training question in every step (see gate_config)
    samples: int = 0                # sampled runs per question, beside the written alternatives
    forced: tuple[str, ...] = ("RA,AG", "QDS")  # the workflows written once per question in every group
    choices: tuple[str, ...] = ("RA,AG", "QDS")  # the planner's menu (Settings.planning.choices; empty: any)
    few_shot: bool = False          # the planner's prompt holds its demonstrations
    update_rule: str = "sgd"        # PPO's (the warm start's is AdamW)
    max_grad_norm: float = 1.0      # PPO's gradient clipping
    # training questions by hop count: as many one-hop as multi-hop, so that nothing but the
    # question's hops tells the planner which way to go
    train_questions: tuple[tuple[int, int], ...] = ((1, 24), (2, 12), (3, 12))
    check_per_hops: int = 20        # held-out questions per hop count
    lr: float = 0.005
    warm_lr: float = 1e-4
    warm_epochs: int = 0            # a menu needs no reply format taught
    warm_questions: int = 16        # the first of the training questions (all hop counts mixed)
    cost: float = 0.46              # JADE's α = β: the one-hop saving's sum = the multi-hop gains'
    ppo: dict = field(default_factory=lambda: {"written_replies": "menu", "batch_baseline": 1.0,
                                               "keep_unanimous": True,
                                               "minibatch_size": 256})  # overrides of ``ppo:``
    max_staleness: int = 0          # the PPO run's async.max_staleness (0: synchronous steps)
    seed: int = 0

    @property
    def workflows(self) -> tuple[str, ...]:
        """What the planner may answer, cheapest first: its menu, else ``WORKFLOWS``."""
        return tuple(w for w in WORKFLOWS if w in self.choices) if self.choices else WORKFLOWS

    @property
    def cheapest(self) -> str:
        """Where the control must move the planner: the cheapest workflow it may answer."""
        return self.workflows[0]


@dataclass
class GateResult:
    settings: GateSettings
    before: list[dict]              # per held-out question: id, type, workflow, reward, f1
    after: list[dict]
    curve: list[dict]               # per PPO step: reward, f1, routing shares of sampled runs
    checks: dict[str, bool]
    figures: dict[str, float]
    seconds: dict[str, float]

    @property
    def passed(self) -> bool:
        return all(self.checks.values())


def decomposes(workflow: str) -> bool:
    return workflow.startswith(("QDS", "QDP"))


def routing_shares(records: list[dict], cheapest: str) -> dict[str, float]:
    """Of held-out (or sampled) runs: the share of multi-hop questions decomposed, of one-hop
    questions answered by ``RA,AG``, and of all answered by the ``cheapest`` workflow."""
    multi = [r for r in records if r["type"] != "hops-1"]
    single = [r for r in records if r["type"] == "hops-1"]
    share = lambda rows, ok: sum(map(ok, rows)) / len(rows) if rows else 0.0  # noqa: E731
    return {"multi_hop_decomposed": share(multi, lambda r: decomposes(r["workflow"])),
            "one_hop_ra_ag": share(single, lambda r: r["workflow"] == "RA,AG"),
            "cheapest": share(records, lambda r: r["workflow"] == cheapest)}


def workflow_table(records: list[dict]) -> dict[str, Counter]:
    """hops type → Counter of the workflow planned for the whole question."""
    table: dict[str, Counter] = {}
    for r in records:
        table.setdefault(r["type"], Counter())[r["workflow"]] += 1
    return dict(sorted(table.items()))


def make_worlds(folder: Path, settings: GateSettings) -> dict[str, Path]:
    """The training and held-out worlds with their BM25 indexes, in ``folder``."""
    from ragteam.stores.index import build_index
    from ragteam.stores.routing_world import make_world, write_world

    paths = {}
    hops = [n for n, _ in settings.train_questions]
    for name, seed, per_hops in (("train", 1000 + settings.seed, dict(settings.train_questions)),
                                 ("check", 2000 + settings.seed, {n: settings.check_per_hops for n in hops})):
        questions, corpus = write_world(make_world(seed, per_hops), folder / name)
        build_index([corpus], "bm25", folder / name / "index")
        paths[f"{name}_questions"], paths[f"{name}_index"] = questions, folder / name / "index"
    return paths


def gate_config(settings: GateSettings, worlds: dict[str, Path], out: Path):
    """The PPO run: MAO-ARAG's loop with the rule-based executors frozen, the planner alone
    trained on JADE's reward (F1 − cost on the run's last call; a broken plan answers nothing).
    Each question's group holds its sampled runs and one run with the root's plan written as each
    workflow of ``settings.forced``; with a menu and ``written_replies: menu`` those written runs
    are the exact expected-reward gradient of the planner's choice (p (1 − p) ΔA a question on a
    two-way choice, fading once its choice is made). Sub-questions are planned ``RA,AG`` by a
    written reply (never trained), so the root's plan is the one decision a run makes. Every
    training question is in every step (``questions_per_step``) and one update takes them all: a
    random few left each step's mix of one-hop and multi-hop questions to chance, and that mix
    moved every plan. Why the rest (no demonstrations, SGD, the batch baseline): the results
    page, runs 35–45."""
    from ragteam.trainers.config import TrainConfig

    index = worlds["check_index" if settings.control else "train_index"]
    return TrainConfig(
        graph="mao_arag", data=str(worlds["train_questions"]), index=str(index), model="offline",
        out=str(out), steps=settings.steps, seed=settings.seed, questions_per_step=settings.questions_per_step,
        samples_per_question=settings.samples, forced_workflows=list(settings.forced),
        plan_choices=list(settings.choices), few_shot=settings.few_shot, update_rule=settings.update_rule,
        optimizer="torch", max_grad_norm=settings.max_grad_norm, temperature=1.0,
        concurrency=64, max_rounds=6, fallback_workflow="", subquestion_workflow="RA,AG",
        frozen_policy="rules:routing-world", train_roles=["planner"],
        reward={"scheme": "jade", "alpha": settings.cost, "beta": settings.cost}, lr=settings.lr,
        save_rollouts=False, export_hf=False, async_={"max_staleness": settings.max_staleness},
        ppo={"advantage": "grpo", "plan_weight": 2.0, "written_replies": "sampled", "epochs": 1,
             "minibatch_size": 64, "micro_batch_tokens": TOKENS_PER_PASS, **settings.ppo})


def planner_requests(examples, policy, few_shot: bool, workflows: tuple[str, ...]):
    """The warm start's calls: each question's plan, with every one of ``workflows`` once
    (so the target is uniform over them, blind to the question's hops), encoded as the policy
    would trace them."""
    from ragteam.nodes.roles.base import Observation
    from ragteam.nodes.roles.jade import PLANNER, workflow_reply
    from ragteam.trainers.experience import Experience

    items = []
    for example in examples:
        request = PLANNER.request(Observation(query=example.question), temperature=1.0, few_shot=few_shot)
        for workflow in workflows:
            generation = policy.encode_reply(request, workflow_reply(workflow))
            items.append(Experience(trajectory=example.id, group=example.id, role="planner",
                                    prompt_ids=list(generation.prompt_ids),
                                    completion_ids=list(generation.completion_ids), old_logprobs=[],
                                    temperature=1.0, reward=0.0))
    return items


def warm_start(trainer, settings: GateSettings) -> dict:
    """A few epochs of SFT on ``planner_requests`` at ``warm_lr`` (``fine_tune``)."""
    side = trainer.backend.side
    items = planner_requests(trainer.examples[:settings.warm_questions], side.policy, side.ctx.settings.few_shot,
                             settings.workflows)
    figures = fine_tune(trainer, items, settings.warm_lr, settings.warm_epochs, WARM_MINIBATCH, TOKENS_PER_PASS,
                        settings.seed)
    return {"warm_nll": figures.get("nll", 0.0), "warm_calls": len(items)}


def fine_tune(trainer, items, lr: float, epochs: int, minibatch: int, token_budget: int, seed: int,
              on_epoch=None) -> dict:
    """``epochs`` of SFT of the trainer's learner on ``items`` with an AdamW of its own (PPO's
    optimizer, its state and its schedule stay untouched, whatever its rule); the KL reference
    and whatever samples the rollouts (an engine, a snapshot) then start from the result. The
    last epoch's figures; ``on_epoch(epoch, figures)`` after each."""
    from ragteam.trainers.learner.optimizers import TorchOptimizer
    from ragteam.trainers.learner.sft_update import sft_epoch

    learner = trainer.backend.learner
    sft = TorchOptimizer(learner.model, lr=lr, max_grad_norm=learner.config.max_grad_norm)
    figures = {}
    for epoch in range(epochs):
        figures = sft_epoch(sft, items, learner.pad_id, minibatch, token_budget, seed + epoch)
        if on_epoch is not None:
            on_epoch(epoch, figures)
    if learner.frozen is not None:  # the KL reference: the policy PPO starts from
        learner.frozen.load_state_dict(learner.model.state_dict())
    trainer.backend.sync()
    return figures


def check(trainer, questions: Path, index: Path) -> list[dict]:
    """Greedy runs of the trainer's team on ``questions`` against ``index``: one record each."""
    from ragteam.nodes.context import RunContext
    from ragteam.stores.datasets import read_dataset
    from ragteam.stores.index import open_retriever
    from ragteam.trainers.rollout import collect

    side = trainer.backend.side
    ctx = RunContext(side.ctx.team, open_retriever(str(index)), replace(side.ctx.settings, temperature=0.0))
    examples = read_dataset(questions).examples
    rollouts, failed = asyncio.run(collect(side.graph, examples, ctx, 1, 64, "check"))
    if failed:
        raise RuntimeError(f"{len(failed)} held-out runs failed, e.g. {failed[0].error}")
    records = []
    for rollout in rollouts:
        outcome = trainer.reward(rollout.result, rollout.example)
        records.append({"id": rollout.example.id, "type": rollout.example.metadata.get("type", ""),
                        "workflow": (rollout.result.topologies or ["(none)"])[0],
                        "reward": outcome.total, "f1": outcome.scores.get("f1", 0.0)})
    return records


def step_point(step: int, metrics: dict, cheapest: str) -> dict:
    """One point of the learning curve from a step's metrics (its sampled runs)."""
    roots = [(key.split("/")[1], key.split("/", 2)[2], n) for key, n in metrics.items() if key.startswith("root/")]
    multi = sum(n for t, _, n in roots if t != "hops-1")
    single = sum(n for t, _, n in roots if t == "hops-1")
    return {"step": step, "reward": metrics.get("reward", 0.0), "f1": metrics.get("f1", 0.0),
            "multi_hop_decomposed": sum(n for t, w, n in roots if t != "hops-1" and decomposes(w)) / max(multi, 1),
            "one_hop_ra_ag": sum(n for t, w, n in roots if t == "hops-1" and w == "RA,AG") / max(single, 1),
            "cheapest": sum(n for _, w, n in roots if w == cheapest) / max(multi + single, 1)}


def menu_probabilities(trainer, questions: list[str], workflows: tuple[str, ...]) -> list[dict[str, float]]:
    """The planner's probability of each of ``workflows`` (its menu) for each of ``questions``,
    at temperature 1 (``nodes.choices.scored_menu``)."""
    from ragteam.nodes.choices import scored_menu
    from ragteam.nodes.roles.base import Observation
    from ragteam.nodes.roles.jade import PLANNER, workflow_reply

    side = trainer.backend.side
    replies = [workflow_reply(w) for w in workflows]

    async def all_questions():  # concurrent: the policy scores them in batches
        requests = [PLANNER.request(Observation(query=q), temperature=1.0, few_shot=side.ctx.settings.few_shot)
                    for q in questions]
        return await asyncio.gather(*(scored_menu(side.policy, r, replies) for r in requests))

    return [dict(zip(workflows, p.tolist())) for _, p, _ in asyncio.run(all_questions())]


def menu_point(step: int, metrics: dict, trainer, settings: GateSettings) -> dict:
    """One point of the learning curve of a planner with a menu: its probability of each
    workflow on the training questions (mean by kind) after the step."""
    rows = list(zip(trainer.examples, menu_probabilities(trainer, [e.question for e in trainer.examples],
                                                          settings.workflows)))
    mean = lambda values: sum(values) / max(len(values), 1)  # noqa: E731
    single = [p for e, p in rows if e.metadata.get("type") == "hops-1"]
    multi = [p for e, p in rows if e.metadata.get("type") != "hops-1"]
    return {"step": step, "reward": metrics.get("reward", 0.0) if settings.samples else float("nan"),
            "f1": metrics.get("f1", 0.0) if settings.samples else float("nan"),
            "multi_hop_decomposed": mean([sum(v for w, v in p.items() if decomposes(w)) for p in multi]),
            "one_hop_ra_ag": mean([p.get("RA,AG", 0.0) for p in single]),
            "cheapest": mean([p[settings.cheapest] for _, p in rows])}


def curve_line(point: dict, settings: GateSettings) -> str:
    """A learning-curve point in words: the planner's mean probabilities on the training
    questions (with a menu), else the shares of its sampled runs and their reward."""
    shares = (f"multi-hop decomposed {point['multi_hop_decomposed']:.0%}, one-hop RA,AG {point['one_hop_ra_ag']:.0%}, "
              f"cheapest ({settings.cheapest}) {point['cheapest']:.0%}")
    return f"p on training questions: {shares}" if settings.choices else f"reward {point['reward']:.3f}, {shares}"


def verdict(settings: GateSettings, before: list[dict], after: list[dict]) -> tuple[dict, dict]:
    """(checks, figures) of a gate run."""
    from ragteam.graphs.eval.compare import paired_bootstrap

    by_id = {r["id"]: r for r in before}
    paired = paired_bootstrap([by_id[r["id"]]["reward"] for r in after], [r["reward"] for r in after],
                              metric="reward", seed=settings.seed)
    shares = routing_shares(after, settings.cheapest)
    figures = {**shares, "reward_before": paired.mean_a, "reward_after": paired.mean_b,
               "reward_gain": paired.difference, "gain_low": paired.low, "gain_high": paired.high}
    if settings.control:
        return {"cheapest workflow ≥ 90%": shares["cheapest"] >= SHARE}, figures
    return {"multi-hop decomposed ≥ 90%": shares["multi_hop_decomposed"] >= SHARE,
            "one-hop RA,AG ≥ 90%": shares["one_hop_ra_ag"] >= SHARE,
            "reward gain interval above 0": paired.low > 0}, figures


def run_gate(settings: GateSettings, folder: str | Path | None = None, on_step=None, watch=None) -> GateResult:
    """Worlds, warm start, greedy check, PPO, greedy check again, verdict. ``folder``: where the
    worlds and the run go (default: a temporary folder, removed after); ``on_step(point)`` after
    each PPO step; ``watch(trainer, worlds, step)`` after the warm start (step 0) and each PPO step,
    for a study that looks inside (examples/research/learning_gate/gate_curve.py)."""
    from ragteam.trainers.loop import Trainer

    with tempfile.TemporaryDirectory(prefix="ragteam-learn-check-") as scratch:
        root = Path(folder) if folder is not None else Path(scratch)
        seconds, started = {}, time.perf_counter()
        worlds = make_worlds(root / "worlds", settings)
        check_index = worlds["train_index" if settings.control else "check_index"]
        trainer = Trainer(gate_config(settings, worlds, root / "ppo"), progress="off")
        try:
            seconds["setup_s"] = time.perf_counter() - started
            started = time.perf_counter()
            warm = warm_start(trainer, settings)
            seconds["warm_start_s"] = time.perf_counter() - started
            started = time.perf_counter()
            before = check(trainer, worlds["check_questions"], check_index)
            seconds["check_s"] = time.perf_counter() - started
            if watch is not None:
                watch(trainer, worlds, 0)
            curve, started = [], time.perf_counter()
            for step in range(1, settings.steps + 1):
                metrics = trainer.train_step()
                trainer.log.write(step, metrics)
                curve.append(menu_point(step, metrics, trainer, settings) if settings.choices
                             else step_point(step, metrics, settings.cheapest))
                if on_step is not None:
                    on_step(curve[-1])
                if watch is not None:
                    watch(trainer, worlds, step)
            seconds["ppo_s"] = time.perf_counter() - started
            after = check(trainer, worlds["check_questions"], check_index)
        finally:
            trainer.close()
        checks, figures = verdict(settings, before, after)
        return GateResult(settings, before, after, curve, checks, {**figures, **warm}, seconds)


def report(result: GateResult) -> str:
    """The gate's verdict, figures and workflow-by-hops tables, as text."""
    s, f = result.settings, result.figures
    name = "control (unrelated articles)" if s.control else "gate"
    lines = [f"learn-check {name}: {'PASS' if result.passed else 'FAIL'}"]
    lines += [f"  {'ok  ' if ok else 'FAIL'} {what}" for what, ok in result.checks.items()]
    lines.append(f"  held-out reward {f['reward_before']:.3f} → {f['reward_after']:.3f}: "
                 f"{f['reward_gain']:+.3f} [{f['gain_low']:+.3f}, {f['gain_high']:+.3f}] (paired 95%)")
    lines.append(f"  multi-hop decomposed {f['multi_hop_decomposed']:.0%}, one-hop RA,AG {f['one_hop_ra_ag']:.0%}, "
                 f"cheapest ({s.cheapest}) {f['cheapest']:.0%}")
    for label, records in (("before PPO", result.before), ("after PPO", result.after)):
        lines.append(f"  workflow by hops, {label}: " + "; ".join(
            f"{t}: " + ", ".join(f"{w} {n}" for w, n in c.most_common()) for t, c in workflow_table(records).items()))
    lines.append("  time: " + ", ".join(f"{k.removesuffix('_s')} {v:.0f} s" for k, v in result.seconds.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["gate", "control"], default=None, help="run one of the two (default: both)")
    p.add_argument("--steps", type=int, default=GateSettings.steps)
    p.add_argument("--lr", type=float, default=GateSettings.lr)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE", default=None, help="also write every figure and record here")
    args = p.parse_args(argv)
    if args.json and Path(args.json).exists():  # before minutes of work; the write below is exclusive too
        p.error(f"--json {args.json}: the file exists; name a new one")
    runs = [False, True] if args.only is None else [args.only == "control"]
    results = []
    for control in runs:
        settings = GateSettings(control=control, steps=args.steps, lr=args.lr, seed=args.seed)
        result = run_gate(settings, on_step=lambda point: print(f"  step {point['step']}: " + curve_line(point, settings),
                                                                 flush=True))
        print(report(result), flush=True)
        results.append(result)
    if args.json:
        try:
            with open(args.json, "x", encoding="utf-8") as handle:  # "x": never over a file of the user's
                json.dump([{**asdict(r), "passed": r.passed} for r in results], handle, indent=1, default=str)
        except FileExistsError:
            print(f"--json {args.json}: the file exists; the figures were not written", file=sys.stderr)
            return 2
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
