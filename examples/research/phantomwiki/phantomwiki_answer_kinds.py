"""What a PhantomWiki score is made of: F1 by hop count and by the kind of answer the gold is, and
a slice of the questions where following the hops can pay.

A question's gold is a *count* ("How many …": small integers, which a reader can guess), a few
names (1–3), or many (a chain that fans out: "the friend of the person whose hobby is X" can have
dozens of right answers, and set F1 over dozens of names stays near zero whatever was retrieved).
The table gives each eval folder's F1 per hop count and kind, under a guessing floor: the one
integer that scores best on the count questions of ``--floor-from`` (training questions),
answered to every count question (and nothing to the others).

    python examples/research/phantomwiki/phantomwiki_answer_kinds.py table --questions DEV.jsonl --floor-from TRAIN.jsonl \\
        runs/pw/eval_before/jade runs/pw/eval_after/jade ...
    python examples/research/phantomwiki/phantomwiki_answer_kinds.py slice --questions TRAIN.jsonl --hops 3 4 \\
        --kind "1-3 names" --exclude runs/pw/round1/questions.jsonl --out slice.jsonl

``slice`` writes the questions of those hop counts and kind, not in any ``--exclude`` file, with
``metadata.type`` set to "hops-N, KIND" (pass a slice of every kind to ``ragteam compare
--by-type`` for paired intervals per hop count and kind).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[3]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.graphs.eval.compare import score_of  # noqa: E402
from ragteam.graphs.eval.evaluate import read_predictions  # noqa: E402
from ragteam.graphs.eval.metrics import set_score  # noqa: E402
from ragteam.stores.datasets import QAExample, read_dataset  # noqa: E402

KINDS = ("count", "1-3 names", ">3 names")
FEW_NAMES = 3  # the most gold names a reader can list from a top-3 retrieval's articles


def answer_kind(golds: list[str]) -> str:
    if golds and all(g.strip().isdigit() for g in golds):
        return "count"
    return "1-3 names" if len(golds) <= FEW_NAMES else ">3 names"


def hops_of(example: QAExample) -> str:
    return str(example.metadata.get("type", "?")).split(",")[0]


def guessed_count(examples: list[QAExample]) -> str:
    """The integer whose answer to every count question scores the best mean set F1."""
    counts = [list(e.golds) for e in examples if answer_kind(list(e.golds)) == "count"]
    if not counts:
        raise ValueError("no count questions to choose a guess from")
    return max(map(str, range(10)), key=lambda guess: sum(set_score(guess, g)["f1"] for g in counts))


def table(args: argparse.Namespace) -> int:
    examples = read_dataset(args.questions).examples
    cells = [(h, k) for h in sorted({hops_of(e) for e in examples}) for k in KINDS]
    cell_of = {e.id: (hops_of(e), answer_kind(list(e.golds))) for e in examples}
    sizes = {c: sum(v == c for v in cell_of.values()) for c in cells}
    cells = [c for c in cells if sizes[c]]
    print("| run | " + " | ".join(f"{h} {k} ({sizes[h, k]})" for h, k in cells) + " |")
    print("|---" * (len(cells) + 1) + "|")
    guess = guessed_count(read_dataset(args.floor_from).examples)
    floor = {e.id: set_score(guess, list(e.golds))["f1"] if cell_of[e.id][1] == "count" else 0.0
             for e in examples}
    rows = [(f"guess {guess} to every count", floor)]
    for folder in args.folders:
        path = folder / "predictions.jsonl"
        rows.append((str(folder), {qid: score_of(r, "f1", path) for qid, r in read_predictions(path).items()}))
    for label, scores in rows:
        by_cell = defaultdict(list)
        for qid, f1 in scores.items():
            if qid in cell_of:
                by_cell[cell_of[qid]].append(f1)
        print(f"| {label} | " + " | ".join(f"{100 * sum(by_cell[c]) / len(by_cell[c]):.1f}" if by_cell[c]
                                          else "-" for c in cells) + " |")
    print("\n(F1 in points per hop count and answer kind, questions in brackets)")
    return 0


def slice_(args: argparse.Namespace) -> int:
    if args.out.exists():
        raise SystemExit(f"phantomwiki_answer_kinds: {args.out} exists; give a new --out")
    excluded = {e.id for path in args.exclude for e in read_dataset(path).examples}
    hops = {f"hops-{n}" for n in args.hops} if args.hops else None
    kinds = set(args.kind) if args.kind else set(KINDS)
    lines = []
    for e in read_dataset(args.questions).examples:
        kind = answer_kind(list(e.golds))
        if e.id in excluded or kind not in kinds or hops and hops_of(e) not in hops:
            continue
        metadata = {**e.metadata, "type": f"{hops_of(e)}, {kind}"}
        lines.append(json.dumps({"id": e.id, "question": e.question, "golden_answers": list(e.golds),
                                 "metadata": metadata}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(line + "\n" for line in lines))
    print(f"{len(lines)} questions -> {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    shown = commands.add_parser("table", help="F1 per hop count and answer kind, with the guessing floor")
    shown.add_argument("folders", nargs="+", type=Path, help="eval folders (each with predictions.jsonl)")
    shown.add_argument("--questions", required=True, help="the QA file they answered")
    shown.add_argument("--floor-from", required=True, help="training questions: the guessed count")
    cut = commands.add_parser("slice", help="write the questions of some hop counts and answer kind")
    cut.add_argument("--questions", required=True)
    cut.add_argument("--hops", type=int, nargs="*", default=None, help="hop counts (default: all)")
    cut.add_argument("--kind", choices=KINDS, action="append", default=[], help="(repeatable; default: all)")
    cut.add_argument("--exclude", action="append", default=[], help="a QA file whose questions to leave out")
    cut.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        return table(args) if args.command == "table" else slice_(args)
    except (ValueError, FileNotFoundError) as error:
        print(f"phantomwiki_answer_kinds: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
