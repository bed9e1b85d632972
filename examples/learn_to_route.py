"""Watch the planner learn which workflow pays: the learning gate, with a live progress bar,
its learning curve and the workflow it plans by hop count, drawn (our version of JADE's Fig. 4).

    python examples/learn_to_route.py --out runs/learn_to_route            # ~10 min on 2 CPU cores
    python examples/learn_to_route.py --out runs/learn_to_route --control  # unrelated articles

The run is ``trainers/learn_check.py``'s gate (its world, rule-based executors and PPO on the
packaged SmolLM2-135M planner); ``--out`` receives ``learning_curve.png``,
``workflow_by_hops.png`` and ``gate.json`` (every figure and held-out record), and must be new.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from ragteam.graphs.apps.progress import Progress  # noqa: E402
from ragteam.stores.atomic import save_figure  # noqa: E402
from ragteam.trainers.learn_check import (GateSettings, WORKFLOWS, curve_line, report, run_gate,  # noqa: E402
                                          workflow_table)


def draw_curve(curve: list[dict], path: Path, cheapest: str, menu: bool) -> None:
    """The routing after each step: with a menu, the planner's mean probabilities on the
    training questions; else the shares of its sampled runs, beside their reward."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p["step"] for p in curve]
    fig, axes = plt.subplots(1, 1 if menu else 2, figsize=(5.5 if menu else 10, 3.6), squeeze=False)
    right = axes[0][-1]
    if not menu:
        axes[0][0].plot(steps, [p["reward"] for p in curve], marker="o")
        axes[0][0].set(xlabel="PPO step", ylabel="mean reward (sampled runs)", title="reward")
    for key, label in (("multi_hop_decomposed", "multi-hop: decomposed"), ("one_hop_ra_ag", "one-hop: RA,AG"),
                       ("cheapest", f"{cheapest} (cheapest)")):
        right.plot(steps, [p[key] for p in curve], marker="o", label=label)
    right.set(xlabel="PPO step", ylabel="planner's probability (training questions)" if menu else
              "share of sampled runs", ylim=(0, 1.05), title="routing")
    right.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def draw_table(before: list[dict], after: list[dict], path: Path) -> None:
    """The workflow planned for each held-out question, by hop count, before and after PPO."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, (label, records) in zip(axes, (("before PPO (warm start)", before), ("after PPO", after))):
        table = workflow_table(records)
        types = list(table)
        bottom = [0.0] * len(types)
        shown = list(WORKFLOWS) + sorted({w for c in table.values() for w in c} - set(WORKFLOWS))
        for workflow in shown:
            shares = [table[t][workflow] / sum(table[t].values()) for t in types]
            ax.bar(types, shares, bottom=bottom, label=workflow)
            bottom = [b + s for b, s in zip(bottom, shares)]
        ax.set(title=label, xlabel="question", ylabel="share of held-out questions")
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="a new folder for the pictures and figures")
    p.add_argument("--control", action="store_true", help="train against unrelated articles instead")
    p.add_argument("--steps", type=int, default=GateSettings.steps)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    out = Path(args.out)
    try:
        out.mkdir(parents=True)  # a new folder: nothing of the user's is written over
    except FileExistsError:
        p.error(f"--out {out}: it exists; name a new folder")
    settings = GateSettings(control=args.control, steps=args.steps, seed=args.seed)
    bar = Progress(settings.steps, "ppo planner", "step", "bar" if sys.stderr.isatty() else "lines", interval=0.0)
    result = run_gate(settings, on_step=lambda point: bar.update(
        1, decomposed=f"{point['multi_hop_decomposed']:.0%}", ra_ag=f"{point['one_hop_ra_ag']:.0%}"))
    bar.close()
    print(report(result))
    print("\nlearning curve:")
    for point in result.curve:
        print(f"  step {point['step']}: " + curve_line(point, settings))
    draw_curve(result.curve, out / "learning_curve.png", settings.cheapest, bool(settings.choices))
    draw_table(result.before, result.after, out / "workflow_by_hops.png")
    (out / "gate.json").write_text(json.dumps({**asdict(result), "passed": result.passed}, indent=1, default=str))
    print(f"\nwrote {out / 'learning_curve.png'}, {out / 'workflow_by_hops.png'}, {out / 'gate.json'}")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
