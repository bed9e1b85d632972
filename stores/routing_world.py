"""A small seeded world where the right workflow is known: the learning gate's data.

Every person has a made-up name whose words no one else shares, and an article stating their
mother and father. A question asks for a chain of relations ending at one person::

    1 hop:  Who is the mother of Avo Keltrin?
    3 hops: Who is the father of the mother of the mother of Avo Keltrin?

One retrieval on the question finds the named person's article (the only one that holds both
words of the name, twice), so it answers one hop; the later hops' articles name nobody in the
question, so no single retrieval reaches them, and a chain answered link by link (serial
decomposition) is what pays. Articles state parents only, never children, so a parent's article
never mentions the child it would be found through. Two seeds give two worlds with no name in
common: train on one, check on the other.

``write_world`` writes ``questions.jsonl`` (FlashRAG JSONL, ``metadata.type`` = ``hops-N``) and
``corpus.jsonl``; ``relation_chain`` reads a question back into its chain (the rule-based
executors of ``nodes.policies.world_rules`` use it and the sentence template ``FACT``).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

RELATIONS = ("mother", "father")
FACT = "The {relation} of {person} is {other}."   # the one sentence form an article states
QUESTION = "Who is the {chain} of {person}?"       # chain: "mother of the father" …
_SYLLABLES = ("ka", "lo", "mi", "ren", "to", "vi", "sa", "dor", "bel", "nu", "ti", "rak", "jo",
              "pe", "lin", "gar", "zo", "fen", "ha", "mu", "qui", "sel", "bra", "ves", "ol", "dri")
_QUESTION_PATTERN = re.compile(r"^Who is the ((?:(?:mother|father) of the )*(?:mother|father)) of (.+?)\?$")
_IDENTITY_PATTERN = re.compile(r"^Who is (.+?)\?$")


@dataclass(frozen=True)
class World:
    """People (each with a unique name), their parents, and the questions asked about them."""

    people: list[str]
    parents: dict[str, dict[str, str]]       # person → relation → the related person
    questions: list[dict]                    # FlashRAG records


def _name(rng: random.Random, taken: set[str]) -> str:
    """A two-word name neither of whose words was used before (BM25 must find a person by name
    alone, never a relative through a shared surname)."""
    while True:
        words = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
                 for _ in range(2)]
        if not taken.intersection(words) and words[0] != words[1]:
            taken.update(words)
            return " ".join(words)


def make_world(seed: int, per_hops: int | Mapping[int, int] = 20, hops: Sequence[int] = (1, 2, 3),
               generations: int | None = None) -> World:
    """A world of ``generations`` (default: the deepest chain + 1) generations, each person past
    the first with a mother and a father in the one before; ``per_hops`` questions of each hop
    count in ``hops`` (or ``{hops: questions}``), each about a different person of the last
    generation."""
    rng = random.Random(seed)
    counts = dict(per_hops) if isinstance(per_hops, Mapping) else {n: per_hops for n in hops}
    depth = generations or max(counts) + 1
    width = max(sum(counts.values()), 8)
    taken: set[str] = set()
    layers = [[_name(rng, taken) for _ in range(width)] for _ in range(depth)]
    parents: dict[str, dict[str, str]] = {}
    for older, younger in zip(layers, layers[1:]):
        for person in younger:
            mother, father = rng.sample(older, 2)
            parents[person] = {"mother": mother, "father": father}
    askable = list(layers[-1])
    rng.shuffle(askable)
    questions, asked = [], 0
    for n, count in counts.items():
        for i in range(count):
            person = askable[asked]
            asked += 1
            chain = [rng.choice(RELATIONS) for _ in range(n)]  # outermost first
            answer = person
            for relation in reversed(chain):
                answer = parents[answer][relation]
            questions.append({"id": f"w{seed}-h{n}-{i}", "question": ask(chain, person),
                              "golden_answers": [answer], "metadata": {"type": f"hops-{n}"}})
    rng.shuffle(questions)  # hop counts mixed, as a dataset's are
    return World([p for layer in layers for p in layer], parents, questions)


def ask(chain: Sequence[str], person: str) -> str:
    """The question for a relation chain (outermost first) about ``person``."""
    return QUESTION.format(chain=" of the ".join(chain), person=person)


def relation_chain(question: str) -> tuple[list[str], str] | None:
    """(relations, outermost first; the person) of a question ``ask`` wrote; None for any other."""
    match = _QUESTION_PATTERN.match(question.strip())
    if match is None:
        return None
    return match.group(1).split(" of the "), match.group(2)


def identity_of(question: str) -> str | None:
    """The person "Who is NAME?" asks about (a decomposition's last step on a one-hop question)."""
    match = _IDENTITY_PATTERN.match(question.strip())
    return match.group(1) if match and relation_chain(question) is None else None


def articles(world: World) -> list[dict]:
    """One corpus record per person: their parents, stated in ``FACT`` sentences."""
    records = []
    for i, person in enumerate(world.people):
        facts = [FACT.format(relation=r, person=person, other=o) for r, o in world.parents.get(person, {}).items()]
        text = " ".join(facts) or f"{person} is one of the oldest people on record."
        records.append({"id": f"p{i}", "title": person, "text": text})
    return records


def write_world(world: World, folder: str | Path) -> tuple[Path, Path]:
    """``questions.jsonl`` and ``corpus.jsonl`` in ``folder`` (created); their paths. Files of
    those names already there are refused, never replaced."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    questions, corpus = folder / "questions.jsonl", folder / "corpus.jsonl"
    for path, lines in ((questions, world.questions), (corpus, articles(world))):
        with open(path, "x", encoding="utf-8") as handle:  # "x": a file there is a FileExistsError
            handle.write("".join(json.dumps(line) + "\n" for line in lines))
    return questions, corpus
