"""The learning recipe's report (examples/learning_recipe.py): the before/after table, the
held-out learning curve, the fixed-workflow table, the workflow chosen per question type at each
stage, the wall time of each stage over every invocation, and the pictures. Reads what the
stages wrote; runs nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from ragteam.graphs.eval.evaluate import read_finished
from ragteam.graphs.eval.headroom import headroom_markdown, headroom_rows, read_candidates
from ragteam.stores.atomic import save_figure
from ragteam.stores.jsonl import read_records
from ragteam.stores.owned import own_file, write_text

if TYPE_CHECKING:
    from learning_recipe import Recipe

STAGE_TIMES = "stage_times.jsonl"  # in OUT: one line per stage command run, finished or stopped
TABLE_KEYS = (("f1", "F1"), ("em", "EM"), ("acc", "acc"), ("llm_calls", "LLM calls"),
              ("retrieval_calls", "retrievals"), ("format_violations", "format viol."))


def records(folder: Path) -> list[dict]:
    return list(read_finished(folder / "predictions.jsonl").values())


def mean(rows: list[dict], key: str) -> float:
    return sum(float(r[key]) for r in rows) / max(len(rows), 1)


def topology_mix(rows: list[dict]) -> Counter:
    return Counter(t for r in rows for t in r["topologies"])


def plot(report: dict, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds, ppo = report["rounds"], report["ppo"]
    figure, axes = plt.subplots(1, 3 if ppo else 2, figsize=(13 if ppo else 9, 3.4))
    x = list(range(len(rounds) + 1))
    axes[0].plot(x[:-1], [100 * r["sample_f1"] for r in rounds], marker="o", label="training samples (T>0)")
    warm = report["warm"] or report["after"]  # the held-out F1 after the warm-start rounds
    axes[0].plot([0, len(rounds)], [100 * report["before"]["f1"], 100 * warm["f1"]],
                 marker="s", label="held-out, greedy")
    if ppo:
        axes[0].plot([len(rounds)], [100 * report["after"]["f1"]], marker="*", markersize=11,
                     linestyle="none", label="held-out after PPO")
    axes[0].set_xlabel("warm-start rounds done")
    axes[0].set_ylabel("F1 (%)")
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"{report['graph']} F1")
    sft = [(f"r{i + 1}e{e['step']}", e["nll"]) for i, r in enumerate(rounds) for e in r["sft"]]
    axes[1].plot([s for s, _ in sft], [v for _, v in sft], marker="o")
    axes[1].set_title("SFT loss (NLL per completion token)")
    axes[1].set_xlabel("round / epoch (e0 = before)")
    if ppo:
        steps = [m["step"] for m in ppo]
        axes[2].plot(steps, [100 * m["f1"] for m in ppo], marker=".", label="F1 (its own plans)")
        axes[2].plot(steps, [100 * m["reward"] for m in ppo], marker=".", label="reward")
        forced = sorted({k.split("/")[1] for m in ppo for k in m if k.startswith("forced/") and k.endswith("/f1")})
        for workflow in forced:  # the workflow groups' other members: F1 of each forced workflow
            axes[2].plot(steps, [100 * m.get(f"forced/{workflow}/f1", float("nan")) for m in ppo],
                         linewidth=0.8, alpha=0.6, label=f"F1 as {workflow} (forced)")
        axes[2].set_title("PPO after the warm start (training samples)")
        axes[2].set_xlabel("PPO step")
        axes[2].legend(fontsize=8)
    figure.tight_layout()
    save_figure(figure, own_file(out / "learning_curve.png"), dpi=90)
    plt.close(figure)

    stages = [("held-out\nbefore", report["mix_before"])]
    stages += [(f"round {i + 1}\nsamples", r["mix"]) for i, r in enumerate(rounds)]
    if ppo:  # the trainer logs each step's workflow shares; summing them weighs the steps alike
        mix = Counter()
        for metrics in ppo:
            mix.update({k.split("/", 1)[1]: v for k, v in metrics.items() if k.startswith("topology/")})
        stages.append(("PPO\nsamples", mix))
    stages += [("held-out\nafter", report["mix_after"])]
    weight = Counter()  # the workflows shown: the largest shares summed over the stages
    for _, mix in stages:
        weight.update({t: c / (sum(mix.values()) or 1) for t, c in mix.items()})
    names = [n for n, _ in weight.most_common(7)]
    if not names:  # no planner, no workflows to show
        return
    figure, axis = plt.subplots(figsize=(7, 3.6))
    bottom = [0.0] * len(stages)
    for name in names + ["other"]:
        shares = []
        for _, mix in stages:
            total = sum(mix.values()) or 1
            count = (sum(c for t, c in mix.items() if t not in names) if name == "other" else mix.get(name, 0))
            shares.append(count / total)
        axis.bar([s for s, _ in stages], shares, bottom=bottom, label=name)
        bottom = [b + s for b, s in zip(bottom, shares)]
    axis.set_ylabel("share of planner rounds")
    axis.set_title(f"{report['graph']} topology mix over training")
    axis.legend(fontsize=7, bbox_to_anchor=(1.02, 1), loc="upper left")
    figure.tight_layout()
    save_figure(figure, own_file(out / "topology_mix.png"), dpi=90)
    plt.close(figure)


def plot_mix_by_type(stages: list[tuple[str, dict[str, Counter]]], graph: str, out: Path) -> None:
    """The paper's Fig. 4 in miniature: per question type, the share of each workflow chosen for
    the whole question at each stage (OUT/topology_by_type.png)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    types = sorted({t for _, counts in stages for t in counts})
    weight = Counter()
    for _, counts in stages:
        for mix in counts.values():
            weight.update({w: c / (sum(mix.values()) or 1) for w, c in mix.items()})
    names = [n for n, _ in weight.most_common(6)]
    if not types or not names:
        return
    figure, axes = plt.subplots(1, len(types), figsize=(4.5 * len(types) + 2, 3.8), squeeze=False)
    labels = [name.replace(": ", ":\n") for name, _ in stages]
    for axis, qtype in zip(axes[0], types):
        bottom = [0.0] * len(stages)
        for name in names + ["other"]:
            shares = []
            for _, counts in stages:
                mix = counts.get(qtype, Counter())
                total = sum(mix.values()) or 1
                count = sum(c for w, c in mix.items() if w not in names) if name == "other" else mix.get(name, 0)
                shares.append(count / total)
            axis.bar(labels, shares, bottom=bottom, label=name)
            bottom = [b + s for b, s in zip(bottom, shares)]
        axis.set_title(f"{qtype} questions")
        axis.tick_params(axis="x", labelsize=6, rotation=30)
    axes[0][0].set_ylabel("share of questions")
    axes[0][-1].legend(fontsize=7, bbox_to_anchor=(1.02, 1), loc="upper left")
    figure.suptitle(f"{graph}: workflow chosen for the whole question")
    figure.tight_layout()
    save_figure(figure, own_file(out / "topology_by_type.png"), dpi=90)
    plt.close(figure)


def held_out_table(rounds: list[dict]) -> list[str]:
    """Held-out F1 after each round that asked for it (``held_out``): the learning curve."""
    measured = [(number, r["held_out"]["f1"]) for number, r in enumerate(rounds, 1) if r.get("held_out")]
    if not measured:
        return []
    labels = list(measured[0][1])
    return ["### Held-out F1 after each round (greedy; the team and its weights as each fixed workflow)", "",
            "| after | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels),
            *(f"| round {number} | " + " | ".join(f"{100 * f1[label]:.1f}" for label in labels) + " |"
              for number, f1 in measured), ""]


def root_workflow(record: dict) -> str:
    """The workflow a run chose for the whole question (its first planner round)."""
    return record["topologies"][0] if record.get("topologies") else "(none)"


def by_type(choices: dict[str, str], types: dict[str, str]) -> dict[str, Counter]:
    """Question type → how often each workflow was chosen."""
    counts: dict[str, Counter] = {}
    for qid, workflow in choices.items():
        counts.setdefault(types.get(qid, "all"), Counter())[workflow] += 1
    return counts


def fixed_table(recipe: Recipe, team: list[dict], fixed: Path) -> str:
    """The trained team beside its own weights as each fixed workflow, by question type, with
    the per-question oracle and the type-level planner over the fixed workflows and the team."""
    runs = {f"{recipe.graph} (planner)": {r["id"]: r for r in team}}
    runs.update({c.label: {r["id"]: r for r in records(fixed / c.folder)} for c in read_candidates(fixed)})
    rows, choosers = headroom_rows(runs, recipe.eval_types)
    return headroom_markdown(f"the trained team and its own weights as fixed workflows, top-{recipe.top_k}",
                             rows, choosers)


def ppo_mix_by_type(ppo_metrics: list[dict], parts: int = 3) -> list[tuple[str, dict[str, Counter]]]:
    """The workflow the team chose for the whole question in its own PPO runs, by question type
    (the trainer's ``root/<type>/<workflow>`` counts), over the first, middle and last part of
    the steps."""
    stages, size = [], max(1, -(-len(ppo_metrics) // parts))
    for start in range(0, len(ppo_metrics), size):
        chunk, counts = ppo_metrics[start:start + size], {}
        for metrics in chunk:
            for key, value in metrics.items():
                if key.startswith("root/"):
                    _, qtype, workflow = key.split("/", 2)
                    counts.setdefault(qtype, Counter())[workflow] += int(value)
        if counts:
            stages.append((f"PPO steps {chunk[0]['step']}-{chunk[-1]['step']}: the team's own choice", counts))
    return stages


def mix_by_type_table(stages: list[tuple[str, dict[str, Counter]]]) -> str:
    """The root workflow chosen per question type at each stage (counts, most common first)."""
    lines = ["| stage | question type | n | workflows chosen for the whole question |", "|---|---|---|---|"]
    for stage, counts in stages:
        for qtype, mix in sorted(counts.items()):
            shown = ", ".join(f"{w.replace('|', chr(92) + '|')} {c}" for w, c in mix.most_common())
            lines.append(f"| {stage} | {qtype} | {sum(mix.values())} | {shown} |")
    return "\n".join(lines)


def stage_times(out: Path) -> dict[str, dict]:
    """OUT/stage_times.jsonl summed per stage, in the order the stages first ran: minutes over
    every invocation, how many there were, and how the last one ended."""
    path = out / STAGE_TIMES
    lines = read_records(path) if path.exists() else []
    stages = {}
    for name in dict.fromkeys(line["stage"] for line in lines):
        runs = [line for line in lines if line["stage"] == name]
        stages[name] = {"minutes": round(sum(r["seconds"] for r in runs) / 60, 1), "invocations": len(runs),
                        "ended": runs[-1]["ended"]}
    return stages


def stage_times_table(stages: dict[str, dict]) -> list[str]:
    if not stages:
        return []
    rows = [f"| {name} | {s['minutes']} | {s['invocations']} |" for name, s in stages.items()]
    total = round(sum(s["minutes"] for s in stages.values()), 1)
    return ["### Wall time per stage, over every invocation", "", "| stage (folder) | minutes | invocations |",
            "|---|---|---|", *rows, f"| all | {total} | |", ""]


def write_report(recipe: Recipe, rows: dict[str, list[dict]], rounds: list[dict], ppo_metrics: list[dict],
                 comparisons: list[str], wall_minutes: float, fixed: Path | None = None) -> str:
    """Stage 5b: the before/after table, the learning curve and topology mix, report.md/json."""
    graph = recipe.graph
    untrained, trained = rows[f"{graph} (untrained)"], rows[f"{graph} (trained)"]
    lines = ["| run | n | " + " | ".join(label for _, label in TABLE_KEYS) + " |",
             "|---|---|" + "---|" * len(TABLE_KEYS)]
    for label, rs in rows.items():
        cells = [f"{100 * mean(rs, k):.1f}" if k in ("f1", "em", "acc") else f"{mean(rs, k):.2f}"
                 for k, _ in TABLE_KEYS]
        lines.append(f"| {label} | {len(rs)} | " + " | ".join(cells) + " |")
    warm = rows.get(f"{graph} (warm start)")
    report = {"wall_minutes": wall_minutes, "rounds": rounds, "graph": graph,
              "before": {"f1": mean(untrained, "f1")}, "after": {"f1": mean(trained, "f1")},
              "warm": {"f1": mean(warm, "f1")} if warm is not None else None, "ppo": ppo_metrics,
              "mix_before": topology_mix(untrained), "mix_after": topology_mix(trained),
              "stage_times": stage_times(recipe.out)}
    held_out = lambda rs: by_type({r["id"]: root_workflow(r) for r in rs}, recipe.eval_types)  # noqa: E731
    mix_stages = [("held-out, untrained", held_out(untrained))]
    for number, r in enumerate(rounds, 1):
        if "picks_by_type" in r:
            mix_stages += [(f"round {number}: the team's own choice", r["own_by_type"]),
                           (f"round {number}: best workflow (learned)", r["picks_by_type"])]
        if r.get("held_out"):
            mix_stages.append((f"held-out, after round {number}", r["held_out"]["own_by_type"]))
    mix_stages += ppo_mix_by_type(ppo_metrics)
    mix_stages += [(f"held-out, {label.split('(')[-1].rstrip(')')}", held_out(rs))
                   for label, rs in rows.items() if label.startswith(graph) and "untrained" not in label]
    report["mix_by_type"] = mix_stages
    plot(report, recipe.out)
    plot_mix_by_type(mix_stages, graph, recipe.out)
    extra = [fixed_table(recipe, trained, fixed), ""] if fixed else []
    text = "\n".join([f"# {graph} learning run", "", f"config: `{recipe.config_path}`, wall time this "
                      f"invocation: {wall_minutes} min", "", *lines, "", *held_out_table(rounds), *extra,
                      "### Workflow chosen for the whole question, by type", "", mix_by_type_table(mix_stages),
                      "", *stage_times_table(report["stage_times"]), *comparisons])
    write_text(own_file(recipe.out / "report.md"), text + "\n")
    write_text(own_file(recipe.out / "report.json"), json.dumps(report, indent=2, default=dict))
    return text
