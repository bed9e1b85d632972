"""The chain of sub-questions each PhantomWiki question spells out, as decomposition targets for
the serial decomposer (``phantomwiki_selectors.py``'s ``given-decompositions``; training
questions only), or written as its reply in a run (``ragteam headroom --given-decompositions``: what a decomposer
that wrote them would reach).

PhantomWiki's questions are templates over a nested phrase: "the brother of the friend of Ann
Lee", or "... of the person whose hobby is X". Read from the inside out, each relation is one
hop, and the chain asks them in order, each naming the previous answer as #k:

    Who is the sister of the brother of the friend of Ann Lee?
    <q1>Who is the friend of Ann Lee?</q1> <q2>Who is the brother of #1?</q2> <q3>Who is the sister of #2?</q3>

A small decomposer never writes these itself: its sampled chains restate the question or peel
the wrong end (docs/results/phantomwiki.md), so hindsight has no right chain to pick.

    python examples/research/phantomwiki/phantomwiki_chains.py --questions ../shared/data/phantomwiki/phantomwiki-train.jsonl \\
        --out runs/phantomwiki-train-chains.jsonl

One-hop questions have no chain (a decomposition has two steps at least) and are left out. A
question no template matches, or whose chain has another length than its ``metadata.hops``, is
an error naming it: the templates are the dataset's, so either means this reading is wrong.

``--written FOLDER`` instead reports how close a run's decomposer came to these chains: per hop
count, how many of its first decompositions in FOLDER (a graph folder of `ragteam eval` or
`headroom`, e.g. OUT/top3/wf-QDS) have the chain's length, and how many are the chain itself
(ignoring case, spacing and a final "?"):

    python examples/research/phantomwiki/phantomwiki_chains.py --questions ../shared/data/phantomwiki/phantomwiki-dev.jsonl \\
        --written runs/dev/top3/wf-QDS
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[3]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.graphs.eval.evaluate import read_predictions  # noqa: E402
from ragteam.nodes.tracing import read_jsonl  # noqa: E402
from ragteam.stores.datasets import read_dataset  # noqa: E402
from phantomwiki_selectors import root_decomposition  # noqa: E402

_ATTRIBUTE = r"date of birth|[a-z]+"  # the one attribute of several words
_ASKS = (("who", re.compile(r"Who is (?P<phrase>.+)\?")),
         ("what", re.compile(rf"What is the (?P<attribute>{_ATTRIBUTE}) of (?P<phrase>.+)\?")),
         ("count", re.compile(r"How many (?P<relation>[a-z]+) does (?P<phrase>.+) have\?")))
_PERSON = re.compile(rf"the person whose (?P<attribute>{_ATTRIBUTE}) is (?P<value>.+)")
_RELATION = re.compile(r"the (?P<relation>[a-z]+) of (?P<rest>.+)")


def chain(question: str) -> list[str]:
    """``question``'s sub-questions, innermost hop first; a ``ValueError`` if no template fits."""
    for ask, pattern in _ASKS:
        if asked := pattern.fullmatch(question.strip()):
            break
    else:
        raise ValueError(f"no PhantomWiki template fits {question!r}")
    relations, phrase = [], asked["phrase"]
    while not (person := _PERSON.fullmatch(phrase)) and (outer := _RELATION.fullmatch(phrase)):
        relations.append(outer["relation"])
        phrase = outer["rest"]
    if person:
        steps, last = [f"Who is the person whose {person['attribute']} is {person['value']}?"], "#1"
    elif phrase.startswith("the "):
        raise ValueError(f"cannot read {phrase!r} in {question!r}")
    else:
        steps, last = [], phrase  # a name: given, no hop
    for relation in reversed(relations):
        steps.append(f"Who is the {relation} of {last}?")
        last = f"#{len(steps)}"
    if ask == "what":
        steps.append(f"What is the {asked['attribute']} of {last}?")
    elif ask == "count":
        steps.append(f"How many {asked['relation']} does {last} have?")
    return steps


def _plain(step: str) -> str:
    return " ".join(step.lower().split()).rstrip("?").rstrip()


def written_against_chains(folder: Path, questions: str) -> dict[int, Counter]:
    """Per hop count: the questions ``folder``'s runs decomposed (their first serial decomposer
    call, ``task_id`` 0, parsed), how many of those have their chain's length, how many are it."""
    chains = {e.id: (chain(e.question), int(e.metadata.get("hops", 0))) for e in read_dataset(questions).examples}
    found: dict[int, Counter] = {}
    for qid, record in read_predictions(folder / "predictions.jsonl").items():
        if qid not in chains or not isinstance(record.get("trace_path"), str):
            continue
        # a malformed decomposition counts too: it is one that missed the chain
        plan = root_decomposition(read_jsonl(folder.parent / record["trace_path"]), well_formed=False)
        if plan is None:
            continue
        steps, hops = chains[qid]
        wrote = [_plain(q) for q in plan.action] if isinstance(plan.action, list) else []
        counts = found.setdefault(hops, Counter())
        counts["decomposed"] += 1
        counts["chain_length"] += len(wrote) == len(steps)
        counts["chain"] += wrote == [_plain(q) for q in steps]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", required=True, help="PhantomWiki questions (training ones)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", type=Path, help="the targets file to write (a new one)")
    target.add_argument("--written", type=Path, metavar="FOLDER",
                        help="instead: compare the decompositions a run wrote with these chains")
    args = parser.parse_args(argv)
    if args.written:
        try:
            found = written_against_chains(args.written, args.questions)
        except (ValueError, FileNotFoundError) as error:
            print(f"phantomwiki_chains: {error}"[:2000], file=sys.stderr)
            return 2
        print("| hops | decomposed | chain's length | the chain |\n|---|---|---|---|")
        for hops, counts in sorted(found.items()) + [("all", sum(found.values(), Counter()))]:
            print(f"| {hops} | {counts['decomposed']} | {counts['chain_length']} | {counts['chain']} |")
        return 0
    if args.out.exists():
        print(f"phantomwiki_chains: {args.out} exists; give a new --out", file=sys.stderr)
        return 2
    lines, lengths = [], Counter()
    try:
        for example in read_dataset(args.questions).examples:
            steps = chain(example.question)
            hops = example.metadata.get("hops")
            if hops is not None and len(steps) != int(hops):
                raise ValueError(f"{len(steps)} steps for a question of {hops} hops: {example.question!r}")
            lengths[len(steps)] += 1
            if len(steps) > 1:
                lines.append(json.dumps({"id": example.id, "question": example.question, "sub_questions": steps}))
    except ValueError as error:
        print(f"phantomwiki_chains: {args.questions}: {error}"[:2000], file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(line + "\n" for line in lines))
    print(f"{len(lines)} chains -> {args.out} (steps: {dict(sorted(lengths.items()))}; one-step questions left out)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
