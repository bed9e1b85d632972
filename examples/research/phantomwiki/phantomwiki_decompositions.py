"""Does the serial decomposer decompose? For each run that a ``QDS`` call opened, whether its first
sub-question restates the whole question (a decomposition in name only: the team then answers the
question in one retrieval, as ``RA,AG`` would) or splits it, and the mean F1 of the runs of each
kind: the measurement behind "the decomposer restates the question" in
docs/results/phantomwiki.md.

    python examples/research/phantomwiki/phantomwiki_decompositions.py runs/pw/ppo              # a PPO run, step by step
    python examples/research/phantomwiki/phantomwiki_decompositions.py runs/pw/round1/explore/top3 --explore

A PPO run is read from OUT/rollouts/step-NNNNNN.jsonl (``save_rollouts``); an exploring round
(``ragteam headroom --out``) from each of its graph folders' predictions and traces. Only a run's
first well-formed ``QDS`` call counts (the root decomposition; a sub-question may be decomposed
again). A first sub-question restates the question when the two, lower-cased, are at least
``--similar`` alike (``difflib``'s ratio, 0.9 by default).
"""

from __future__ import annotations

import argparse
import re
import sys
from difflib import SequenceMatcher
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[3]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.stores.jsonl import read_records  # noqa: E402

SUB_QUESTION = re.compile(r"<q\d+>(.*?)</q\d+>", re.S)


def restates(question: str, sub_questions: list[str], similar: float) -> bool:
    return SequenceMatcher(None, sub_questions[0].lower().strip(), question.lower().strip()).ratio() >= similar


def first_decomposition(calls) -> list[str] | None:
    """The sub-questions of the first well-formed QDS call among ``calls`` (dicts with role,
    format_ok and the reply's text), or None."""
    for call in calls:
        if call["role"] == "QDS" and call["format_ok"] in (True, "True"):
            found = SUB_QUESTION.findall(call.get("text") or call.get("completion_text") or "")
            if found:
                return [q.strip() for q in found]
    return None


def tally(runs, similar: float) -> dict[str, list[float]]:
    """``runs``: (question, F1, calls) → {"restates": [F1…], "splits": [F1…]} over the runs a
    QDS call opened."""
    kinds: dict[str, list[float]] = {"restates": [], "splits": []}
    for question, f1, calls in runs:
        sub_questions = first_decomposition(calls)
        if sub_questions is not None:
            kinds["restates" if restates(question, sub_questions, similar) else "splits"].append(f1)
    return kinds


def ppo_steps(run: Path):
    """(label, runs) for each saved step of a PPO run."""
    paths = sorted((run / "rollouts").glob("step-*.jsonl"))
    if not paths:
        raise SystemExit(f"{run}: no rollouts/step-*.jsonl (a PPO run's --out folder)")
    for path in paths:
        records = read_records(path)
        yield f"step {int(path.stem.removeprefix('step-'))}", [(r["question"], r["f1"], r["calls"]) for r in records]


def explore_folders(root: Path):
    """(label, runs) for each graph folder of an exploring round."""
    predictions = sorted(root.glob("*/predictions.jsonl"))
    if not predictions:
        raise SystemExit(f"{root}: no */predictions.jsonl (a `ragteam headroom --out` folder)")
    for path in predictions:
        runs = []
        for record in read_records(path):
            if isinstance(record.get("trace_path"), str):
                runs.append((record["question"], record["f1"], read_records(root / record["trace_path"])))
        yield path.parent.name, runs


def print_row(label: str, kinds: dict[str, list[float]]) -> None:
    total = len(kinds["restates"]) + len(kinds["splits"])
    if total:
        mean = lambda xs: f"{100 * sum(xs) / len(xs):.1f}" if xs else "-"  # noqa: E731
        print(f"| {label} | {total} | {len(kinds['restates'])} | {len(kinds['restates']) / total:.2f} | "
              f"{mean(kinds['restates'])} | {mean(kinds['splits'])} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a PPO run's --out folder, or with --explore a headroom folder")
    parser.add_argument("--explore", action="store_true", help="the folder is an exploring round's")
    parser.add_argument("--similar", type=float, default=0.9, help="restating threshold (default 0.9)")
    args = parser.parse_args(argv)
    print("| runs of | QDS runs | restating q1 | share | F1 restating | F1 splitting |")
    print("|---|---|---|---|---|---|")
    pooled: dict[str, list[float]] = {"restates": [], "splits": []}
    for label, runs in (explore_folders(args.folder) if args.explore else ppo_steps(args.folder)):
        kinds = tally(runs, args.similar)
        print_row(label, kinds)
        for kind, f1s in kinds.items():
            pooled[kind] += f1s
    if not args.explore:
        print_row("all steps", pooled)
    return 0


if __name__ == "__main__":
    sys.exit(main())
