"""How long are the serial decomposer's chains, and which reach the evidence? For each candidate of
an exploring round on PhantomWiki questions (``ragteam headroom``, e.g. with
``--decomposer-example-steps 3 --decomposer-example-steps 4``): F1, the share of gold names its
answer generators had in their documents, how many sub-questions its root decomposition
wrote, and how many of those chains hop (every step after the first names an earlier answer,
``#k``: a chain that repeats the nested phrase instead retrieves the same articles again), each
by hop count; then what the ``hindsight-decompositions`` selector would teach: per
question the decomposition that reached the most gold names, by hops.

    python examples/research/phantomwiki/phantomwiki_decomposition_lengths.py runs/pw/round1/explore/top3 \\
        --questions runs/pw/round1/questions.jsonl [--limit 80]

Only the questions of ``--questions`` (its first ``--limit``) count, so candidates that ran on
more questions are compared on the same ones. Questions whose gold is a count have no names to
reach: they count for F1 only.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[3]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.graphs.eval.evaluate import read_predictions  # noqa: E402
from ragteam.graphs.eval.headroom import read_candidates  # noqa: E402
from ragteam.nodes.parsing import references  # noqa: E402
from ragteam.nodes.tracing import read_jsonl  # noqa: E402
from ragteam.stores.datasets import read_dataset  # noqa: E402
from phantomwiki_selectors import best_decompositions, names_reached, root_decomposition  # noqa: E402
from ragteam.trainers.algorithms.sft import gold_names  # noqa: E402


def percent(values: list[float]) -> str:
    return f"{100 * sum(values) / len(values):.1f}" if values else "-"


def by_hops(values: dict[str, list[float]], hops: list[str]) -> str:
    return " / ".join(percent(values[h]) for h in hops)


def hops_along(sub_questions: list[str]) -> bool:
    """A chain of at least two steps whose every later step names an earlier answer."""
    return len(sub_questions) > 1 and all(references(q) for q in sub_questions[1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="an exploring round's OUT/top<k> folder")
    parser.add_argument("--questions", required=True, help="the round's questions (their hop counts)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N of them")
    args = parser.parse_args(argv)
    examples = read_dataset(args.questions).examples[: args.limit]
    hop_of = {e.id: str(e.metadata.get("type", "?")) for e in examples}
    hops = sorted(set(hop_of.values()))
    print(f"| candidate | runs | F1 ({' / '.join(hops)}) | gold names in AG documents, % | "
          "root sub-questions by hops: {count: runs} | chains that hop, by hops |")
    print("|---|---|---|---|---|---|")
    for candidate in read_candidates(args.folder):
        path = args.folder / candidate.folder / "predictions.jsonl"
        records = [r for r in read_predictions(path).values() if r["id"] in hop_of] if path.is_file() else []
        f1, reach, steps, hopping = defaultdict(list), defaultdict(list), defaultdict(Counter), Counter()
        for record in records:
            hop = hop_of[record["id"]]
            f1[hop].append(record["f1"])
            calls = read_jsonl(args.folder / record["trace_path"])
            if golds := gold_names(record):
                reach[hop].append(names_reached(calls, golds) / len(golds))
            if (plan := root_decomposition(calls)) is not None:
                steps[hop][len(plan.action)] += 1
                hopping[hop] += hops_along(plan.action)
        everything = [x for values in f1.values() for x in values]
        shown = {h: dict(sorted(steps[h].items())) for h in hops if steps[h]}
        print(f"| {candidate.label} | {len(records)} | {percent(everything)} ({by_hops(f1, hops)}) | "
              f"{by_hops(reach, hops)} | {shown or '-'} | {' / '.join(str(hopping[h]) for h in hops)} |")
    best, compared = best_decompositions([args.folder])
    chosen, reached = defaultdict(Counter), defaultdict(list)
    for qid, (share, plan, _) in best.items():
        if qid in hop_of:
            chosen[hop_of[qid]][len(plan.action)] += 1
            reached[hop_of[qid]].append(share)
    print(f"\nhindsight decompositions (of {compared} compared, all questions of the folder): "
          f"{sum(map(len, reached.values()))} of these questions taught; sub-questions by hops "
          f"{ {h: dict(sorted(chosen[h].items())) for h in hops if chosen[h]} }; gold names reached, % "
          f"({' / '.join(hops)}): {by_hops(reached, hops)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
