"""The learning gate's world with the whole team on one model (issue 73, step 7): every role of
JADE on the packaged SmolLM2-135M, warm-started by SFT on what the rule-based executors
(``rules:routing-world``) reply, then joint PPO with the gate's estimator. A report, not a gate:
held-out reward and routing after the warm start and after PPO, paired.

    python examples/research/learning_gate/whole_team.py                  # the defaults below
    python examples/research/learning_gate/whole_team.py '{"steps": 2}'   # TeamSettings fields

Stages, each timed: the worlds; the teacher's runs (every training question as ``RA,AG`` and as
``QDS``, each executor call replied by the rules and recorded with the ids the model would
have sampled them with); SFT on those calls (AdamW, the planner's calls left out: it chooses
from its menu, so no format needs teaching, and its choice is what PPO is for); greedy held-out
runs; PPO (the planner's menu written as both workflows, ``forced_samples`` runs of each, so
that executors are compared within a workflow too); greedy held-out runs again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[3]
if (_CHECKOUT / "ragteam" / "__init__.py").is_file() and str(_CHECKOUT) not in sys.path:
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.trainers.learn_check import (GateSettings, check, fine_tune, make_worlds,  # noqa: E402
                                          routing_shares, workflow_table)

WORKFLOWS = ("RA,AG", "QDS")
# the executors' prompts hold retrieved articles and share little: the gate's 32k-token passes
# (its planner prompts share ~245 tokens) held ~40 GB of activations here and were killed
TOKENS_PER_PASS = 4096


@dataclass(frozen=True)
class TeamSettings:
    """One whole-team run: the gate's worlds (``train_questions``, ``check_per_hops``, ``seed``)
    and menu, its PPO estimator (``ppo``), with every role trained."""

    train_questions: tuple[tuple[int, int], ...] = ((1, 12), (2, 6), (3, 6))  # by hop count
    check_per_hops: int = 10
    questions_per_step: int = 8      # PPO's (the training questions in turn)
    sft_epochs: int = 3
    sft_lr: float = 1e-4
    steps: int = 3
    forced_samples: int = 2          # runs per workflow in a PPO group
    lr: float = 0.01                 # PPO's (SGD, as the gate's)
    cost: float = 0.46
    ppo: dict = field(default_factory=lambda: dict(GateSettings().ppo))
    seed: int = 0

    def gate(self) -> GateSettings:
        return GateSettings(train_questions=self.train_questions, check_per_hops=self.check_per_hops,
                            seed=self.seed, cost=self.cost, lr=self.lr)


class Teacher:
    """Every role replied by ``rules``, recorded as ``student`` would have sampled the reply (its
    prompt ids and the reply's tokens): traces a model can be fine-tuned on."""

    exact_ids = True

    def __init__(self, rules, student):
        self.rules, self.student, self.name = rules, student, f"teacher:{rules.name}"

    async def generate(self, requests):
        from ragteam.nodes.policies.protocol import written_reply

        replies = await self.rules.generate(requests)
        return [written_reply(self.student, request, reply.text) for request, reply in zip(requests, replies)]

    def encode_reply(self, request, text):
        return self.student.encode_reply(request, text)


def team_config(settings: TeamSettings, worlds: dict[str, Path], out: Path):
    """JADE on the training world, every role on the model and trained, the gate's estimator."""
    from ragteam.trainers.config import TrainConfig

    gate = settings.gate()
    return TrainConfig(
        graph="jade", data=str(worlds["train_questions"]), index=str(worlds["train_index"]), model="offline",
        out=str(out), steps=settings.steps, seed=settings.seed,
        questions_per_step=settings.questions_per_step, samples_per_question=0,
        forced_workflows=list(WORKFLOWS), forced_samples=settings.forced_samples, plan_choices=list(WORKFLOWS),
        few_shot=False, update_rule="sgd", optimizer="torch", max_grad_norm=gate.max_grad_norm,
        temperature=1.0, concurrency=64, max_rounds=6, fallback_workflow="", subquestion_workflow="RA,AG",
        frozen_roles=[], reward={"scheme": "jade", "alpha": settings.cost, "beta": settings.cost}, lr=settings.lr,
        save_rollouts=False, export_hf=False,
        ppo={"advantage": "grpo", "plan_weight": 2.0, "epochs": 1, "minibatch_size": 64,
             "micro_batch_tokens": TOKENS_PER_PASS, **settings.ppo})


def teacher_calls(trainer, worlds: dict[str, Path]):
    """The executor calls of the rules' runs of every training question, each as
    ``RA,AG`` and as ``QDS``, as SFT items, and the teacher's mean F1 per workflow."""
    from ragteam.nodes.context import RunContext
    from ragteam.nodes.policies.spec import load_policy
    from ragteam.nodes.team import Team
    from ragteam.nodes.written import WrittenReplies
    from ragteam.stores.index import open_retriever
    from ragteam.trainers.experience import to_experiences
    from ragteam.trainers.rollout import collect

    side = trainer.backend.side
    teacher = Teacher(load_policy("rules:routing-world"), side.policy)
    settings = replace(side.ctx.settings, temperature=0.0).updated(planning={"choices": ()})
    ctx = RunContext(Team(teacher), open_retriever(str(worlds["train_index"])), settings)
    examples = trainer.examples
    items, f1 = [], {}
    for workflow in WORKFLOWS:
        run_ctx = replace(ctx, settings=settings.updated(written=WrittenReplies.fixed(workflow, "RA,AG")))
        rollouts, failed = asyncio.run(collect(side.graph, examples, run_ctx, 1, 64, f"teacher-{workflow}"))
        if failed:
            raise RuntimeError(f"{len(failed)} teacher runs failed, e.g. {failed[0].error}")
        scores = []
        for rollout in rollouts:
            transitions = rollout.result.transitions
            items += to_experiences(transitions, [0.0] * len(transitions), group=rollout.example.id,
                                    train_roles={t.role for t in transitions if t.role != "planner"})
            scores.append(trainer.reward(rollout.result, rollout.example).scores.get("f1", 0.0))
        f1[workflow] = sum(scores) / max(len(scores), 1)
    return items, f1


def print_epoch(epoch: int, figures: dict) -> None:
    print(f"  SFT epoch {epoch + 1}: nll {figures['nll']:.3f} "
          + " ".join(f"{k.split('/')[1]}={v:.3f}" for k, v in figures.items() if k.startswith("nll/")), flush=True)


def summary(records: list[dict]) -> dict:
    shares = routing_shares(records, "RA,AG")
    mean = lambda key: sum(r[key] for r in records) / max(len(records), 1)  # noqa: E731
    by_type = {}
    for r in records:
        by_type.setdefault(r["type"], []).append(r["f1"])
    return {"reward": mean("reward"), "f1": mean("f1"), **shares,
            "f1_by_type": {t: sum(v) / len(v) for t, v in sorted(by_type.items())},
            "workflows": {t: dict(c) for t, c in workflow_table(records).items()}}


def run(settings: TeamSettings, folder: Path) -> dict:
    from ragteam.graphs.eval.compare import paired_bootstrap
    from ragteam.trainers.loop import Trainer

    seconds, started = {}, time.perf_counter()
    worlds = make_worlds(folder / "worlds", settings.gate())
    trainer = Trainer(team_config(settings, worlds, folder / "ppo"), progress="off")
    checked = lambda: check(trainer, worlds["check_questions"], worlds["check_index"])  # noqa: E731
    try:
        seconds["setup"] = time.perf_counter() - started
        stages = {}
        started = time.perf_counter()
        stages["untrained"] = checked()
        seconds["check"] = time.perf_counter() - started
        print("untrained:", json.dumps(summary(stages["untrained"])), flush=True)
        started = time.perf_counter()
        items, teacher_f1 = teacher_calls(trainer, worlds)
        seconds["teacher"] = time.perf_counter() - started
        print(f"teacher: {len(items)} executor calls; its F1 on the training questions {teacher_f1}", flush=True)
        started = time.perf_counter()
        sft = fine_tune(trainer, items, settings.sft_lr, settings.sft_epochs, 8, TOKENS_PER_PASS, settings.seed,
                        on_epoch=print_epoch)
        seconds["sft"] = time.perf_counter() - started
        stages["warm"] = checked()
        print("after SFT:", json.dumps(summary(stages["warm"])), flush=True)
        started = time.perf_counter()
        for step in range(1, settings.steps + 1):
            metrics = trainer.train_step()
            forced = ", ".join(f"{w} reward {metrics[f'forced/{w}/reward']:.3f} f1 {metrics[f'forced/{w}/f1']:.3f}"
                               for w in WORKFLOWS if f"forced/{w}/reward" in metrics)
            print(f"  PPO step {step}: {forced}; format violations {metrics['format_violation_rate']:.2f}, "
                  f"trained calls {metrics['trained_transitions']}, rollouts {metrics['rollout_s']:.0f} s, "
                  f"update {metrics.get('learn_s', 0):.0f} s", flush=True)
        seconds["ppo"] = time.perf_counter() - started
        stages["ppo"] = checked()
        print("after PPO:", json.dumps(summary(stages["ppo"])), flush=True)
    finally:
        trainer.close()
    by_id = {r["id"]: r for r in stages["warm"]}
    pairs = {}
    for key in ("reward", "f1"):
        paired = paired_bootstrap([by_id[r["id"]][key] for r in stages["ppo"]], [r[key] for r in stages["ppo"]],
                                  metric=key, seed=settings.seed)
        pairs[key] = {"warm": paired.mean_a, "ppo": paired.mean_b, "difference": paired.difference,
                      "low": paired.low, "high": paired.high}
    return {"settings": asdict(settings), "teacher_f1": teacher_f1, "sft": sft, "seconds": seconds,
            "stages": {k: summary(v) for k, v in stages.items()}, "ppo_vs_warm": pairs, "records": stages}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("settings", nargs="?", default="{}", help="TeamSettings fields as a JSON object")
    parser.add_argument("--json", metavar="FILE", help="also write every figure and record here (a new file)")
    args = parser.parse_args(argv)
    values = json.loads(args.settings)
    if "train_questions" in values:
        values["train_questions"] = tuple(tuple(pair) for pair in values["train_questions"])
    settings = TeamSettings(**values)
    if args.json and Path(args.json).exists():
        parser.error(f"--json {args.json}: the file exists; name a new one")
    with tempfile.TemporaryDirectory(prefix="ragteam-whole-team-") as scratch:
        result = run(settings, Path(scratch))
    print("PPO vs warm start (paired 95%): " + "; ".join(
        f"{k} {v['warm']:.3f} → {v['ppo']:.3f}, {v['difference']:+.3f} [{v['low']:+.3f}, {v['high']:+.3f}]"
        for k, v in result["ppo_vs_warm"].items()))
    print("time: " + ", ".join(f"{k} {v:.0f} s" for k, v in result["seconds"].items()))
    if args.json:
        with open(args.json, "x", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
