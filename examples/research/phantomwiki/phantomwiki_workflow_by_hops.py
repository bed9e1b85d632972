"""Which workflow a team's planner chose, by hop count: for each eval folder, the share of
questions whose whole-question plan was serial decomposition (``QDS``), what it planned for the
sub-questions, and F1, per hop count; a table on stdout and, with ``--figure``, a bar chart.

    python examples/research/phantomwiki/phantomwiki_workflow_by_hops.py --questions DEV.jsonl \\
        --run "untrained=OUT/eval_before/jade" --run "trained=OUT/eval_after/jade" --figure by_hops.png

Hop counts are the questions' ``metadata.hops`` (the wording's count, ``phantomwiki_wording_types.py``,
is the same on both shared worlds).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path


def hop_counts(questions: Path) -> dict[str, int]:
    hops = {}
    for number, line in enumerate(questions.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                example = json.loads(line)
                hops[example["id"]] = int(example["metadata"]["hops"])
            except (ValueError, KeyError, TypeError) as error:
                raise SystemExit(f"phantomwiki_workflow_by_hops: {questions}:{number}: {error!r}") from None
    return hops


def by_hops(folder: Path, hops: dict[str, int]) -> dict[int, dict]:
    """hop count → {n, qds (share of root plans), f1 (mean), subplans (Counter)} of one run."""
    rows: dict[int, list[dict]] = defaultdict(list)
    for line in (folder / "predictions.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["id"] in hops:
            rows[hops[record["id"]]].append(record)
    return {h: {"n": len(rs), "qds": sum((r["topologies"] or [""])[0] == "QDS" for r in rs) / len(rs),
                "f1": sum(r["f1"] for r in rs) / len(rs),
                "subplans": Counter(t for r in rs for t in r["topologies"][1:])}
            for h, rs in sorted(rows.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=Path, required=True, help="the questions the runs answered")
    parser.add_argument("--run", action="append", required=True, metavar="LABEL=FOLDER",
                        help="an eval graph folder (OUT/GRAPH, with predictions.jsonl); repeatable")
    parser.add_argument("--figure", type=Path, help="also draw the QDS share by hop count here (a new file)")
    args = parser.parse_args(argv)
    hops = hop_counts(args.questions)
    runs = {}
    for spec in args.run:
        label, _, folder = spec.partition("=")
        if not folder or not (Path(folder) / "predictions.jsonl").is_file():
            parser.error(f"--run {spec!r}: give LABEL=FOLDER, a folder with predictions.jsonl")
        runs[label] = by_hops(Path(folder), hops)
    print("| run | hops | n | QDS for the whole question | F1 | sub-question plans |")
    print("|---|---|---|---|---|---|")
    for label, table in runs.items():
        for h, row in table.items():
            subplans = ", ".join(f"{w} {c}" for w, c in row["subplans"].most_common(3)) or "—"
            print(f"| {label} | {h} | {row['n']} | {100 * row['qds']:.0f}% | {100 * row['f1']:.1f} | {subplans} |")
    if args.figure:
        from ragteam.stores.owned import new_file

        try:
            new_file(args.figure, "--figure")  # never over a file that is there
        except ValueError as error:
            parser.error(str(error))
        draw(runs, args.figure)
    return 0


def draw(runs: dict[str, dict[int, dict]], figure: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = sorted({h for table in runs.values() for h in table})
    width = 0.8 / len(runs)
    fig, ax = plt.subplots(figsize=(8.8, 3.6))
    for i, (label, table) in enumerate(runs.items()):
        ax.bar([h + (i - (len(runs) - 1) / 2) * width for h in counts],
               [100 * table.get(h, {"qds": 0})["qds"] for h in counts], width, label=label)
    ax.set_xticks(counts, [f"{h} hop{'s' * (h > 1)}" for h in counts])
    ax.set_ylabel("QDS for the whole question (%)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the bars, not over them
    fig.tight_layout()
    fig.savefig(figure, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
