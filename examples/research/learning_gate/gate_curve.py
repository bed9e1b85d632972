"""A learning-gate run watched step by step: after every PPO step, the greedy plans for the
held-out questions by hop count and the planner's probability of each workflow on a few of
them per hop count. The gate itself (trainers/learn_check.py) checks only the end; this shows
whether what moved was shared by every question or depended on its hops
(docs/results/learning_gate.md, runs 20–29).

    python examples/research/learning_gate/gate_curve.py '{"cost": 0.46, "forced": ["RA,AG", "QDS"]}'

The argument is a JSON object of ``GateSettings`` fields (``ppo`` overrides the PPO section);
``--probe N`` sets the held-out questions per hop count whose probabilities are measured (8);
``"update_rule": "sgd"`` trains with plain SGD instead of AdamW (runs 30–32 swapped it in by hand).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[3]
if (_CHECKOUT / "ragteam" / "__init__.py").is_file() and str(_CHECKOUT) not in sys.path:
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.nodes.roles.base import Observation  # noqa: E402
from ragteam.nodes.roles.jade import PLANNER, workflow_reply  # noqa: E402
from ragteam.stores.datasets import read_dataset  # noqa: E402
from ragteam.trainers.learn_check import (GateSettings, check, curve_line, menu_probabilities, report,  # noqa: E402
                                          routing_shares, run_gate, workflow_table)


def workflow_probabilities(trainer, questions: dict[str, list[str]], workflows) -> dict[str, dict[str, float]]:
    """Hop type → workflow → the planner's mean probability of replying with it: with a menu,
    normalised over it (``menu_probabilities``); else the learner's probability of the whole
    reply, at temperature 1."""
    side, learner = trainer.backend.side, trainer.backend.learner
    found = {}
    for kind, texts in sorted(questions.items()):
        if side.ctx.settings.planning.choices:
            rows = menu_probabilities(trainer, texts, workflows)
        else:
            rows = []
            for text in texts:
                request = PLANNER.request(Observation(query=text), temperature=1.0, few_shot=side.ctx.settings.few_shot)
                replies = {w: side.policy.encode_reply(request, workflow_reply(w)) for w in workflows}
                rows.append({w: math.exp(sum(learner.logprobs(list(r.prompt_ids), list(r.completion_ids), 1.0,
                                                               role="planner"))) for w, r in replies.items()})
        found[kind] = {w: sum(row[w] for row in rows) / len(rows) for w in workflows}
    return found


def watcher(settings: GateSettings, probe_size: int):
    """``run_gate``'s ``watch``: the greedy held-out plans by hop count and the probabilities."""
    probe: dict[str, list[str]] = {}

    def watch(trainer, worlds: dict, step: int) -> None:
        if not probe:
            for example in read_dataset(worlds["check_questions"]).examples:
                texts = probe.setdefault(example.metadata.get("type", "all"), [])
                if len(texts) < probe_size:
                    texts.append(example.question)
        index = worlds["train_index" if settings.control else "check_index"]
        records = check(trainer, worlds["check_questions"], index)
        shares = routing_shares(records, settings.cheapest)
        table = "; ".join(f"{kind}: " + ", ".join(f"{w} {n}" for w, n in counts.most_common())
                          for kind, counts in workflow_table(records).items())
        print(f"{'before PPO' if step == 0 else f'after step {step}'}: greedy multi-hop decomposed "
              f"{shares['multi_hop_decomposed']:.0%}, one-hop RA,AG {shares['one_hop_ra_ag']:.0%} | {table}")
        print("  p: " + " | ".join(f"{kind} " + " ".join(f"{w}={p:.2f}" for w, p in row.items())
                                   for kind, row in workflow_probabilities(trainer, probe, settings.workflows).items()),
              flush=True)
    return watch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("settings", nargs="?", default="{}", help="GateSettings fields as a JSON object")
    parser.add_argument("--probe", type=int, default=8, help="held-out questions per hop count measured")
    args = parser.parse_args(argv)
    values = json.loads(args.settings)
    settings = GateSettings(**{k: tuple(v) if k in ("forced", "choices") else v for k, v in values.items()})
    print(settings, flush=True)
    watch = watcher(settings, args.probe)
    result = run_gate(settings, watch=watch, on_step=lambda point: print(
        f"step {point['step']}: " + curve_line(point, settings), flush=True))
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
