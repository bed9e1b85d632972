"""PhantomWiki question types a planner can see: the hop count as the wording spells it and
whether the question asks "How many", read from the question text alone, never from its gold
answers (so not from the size of the answer set, which ``phantomwiki_answer_kinds.py`` uses).

    python examples/research/phantomwiki/phantomwiki_wording_types.py --questions TRAIN.jsonl --out typed.jsonl

writes the questions with ``metadata.type`` set to "hops-N, count" or "hops-N, names" (what
``planner_targets: type`` and ``ragteam compare --by-type`` group by) and prints how often the
wording's hop count agrees with the generator's own (``metadata.hops``).

Hops from the wording: PhantomWiki's templates chain relations with "of" ("the sister of the
friend of X"), may start from a "person whose ATTRIBUTE is V" lookup, and may end on a counted
relation ("How many brothers does ... have?"); each is one step. "date of birth" is an attribute
name, not a link, and what follows "whose ... is" is a value ("chief of staff"), not a link.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

_ATTRIBUTE_WITH_OF = re.compile(r"\bdate of birth\b", re.IGNORECASE)
_LINK = re.compile(r"\bof\b", re.IGNORECASE)
_COUNT = re.compile(r"^\s*how many\b", re.IGNORECASE)


def is_count(question: str) -> bool:
    return bool(_COUNT.match(question))


def wording_hops(question: str) -> int:
    """Reasoning steps the question's wording spells out: links ("of"), a lookup ("whose"), and a
    counted relation ("How many"); at least 1."""
    chain, lookup, _value = _ATTRIBUTE_WITH_OF.sub("birthdate", question).partition(" whose ")
    steps = len(_LINK.findall(chain)) + bool(lookup) + is_count(question)
    return max(steps, 1)


def wording_type(question: str) -> str:
    return f"hops-{wording_hops(question)}, {'count' if is_count(question) else 'names'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", required=True, help="a PhantomWiki question file (JSONL)")
    parser.add_argument("--out", required=True, help="the typed copy (must not exist)")
    args = parser.parse_args(argv)
    from ragteam.stores.owned import create_text, new_file

    try:
        out = new_file(args.out, "--out")  # never over a file that is there
    except ValueError as error:
        raise SystemExit(f"phantomwiki_wording_types: {error}") from None
    lines, agree, total = [], 0, 0
    with open(args.questions, encoding="utf-8") as source:
        for number, line in enumerate(source, 1):
            if not line.strip():
                continue
            try:
                example = json.loads(line)
                question, metadata = example["question"], dict(example.get("metadata") or {})
            except (ValueError, KeyError, TypeError) as error:
                raise SystemExit(f"phantomwiki_wording_types: {args.questions}:{number}: {error}") from None
            hops = wording_hops(question)
            total += 1
            agree += str(metadata.get("hops", metadata.get("type", ""))).removeprefix("hops-") == str(hops)
            lines.append(json.dumps({**example, "metadata": {**metadata, "type": wording_type(question)}}))
    create_text(out, "\n".join(lines) + "\n")
    print(f"{out}: {total} questions; the wording's hop count agrees with the generator's on {agree}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
