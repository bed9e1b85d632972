"""Can serial decomposition reach a PhantomWiki question's evidence with top-k retrieval, even when
it decomposes perfectly? A model-free bound for ``QDS`` against one retrieval (``RA,AG``).

Every PhantomWiki question is a chain over one world's people: "What is the occupation of the
sister of the friend of Eva Wingard?" reads Eva's article (her friends), each friend's (their
sisters), then each sister's (her occupation). Each fact of a person sits in that person's article,
so a hop needs the articles of every person it starts from. This script parses the world's articles
and the templated questions, follows each chain inside out as a perfect serial decomposer would
write it (one sub-question per hop, "#1" standing for the previous hop's answers, here written out
as the gold names joined by commas), and asks BM25 for each sub-question's top k. It reports, by
hops:

- ``one retrieval``: every article the chain needs is in the top k of the whole question
  (``RA,AG``'s one query);
- ``perfect QDS``: each hop's articles are in the top k of that hop's own sub-question, with the
  previous answers filled in (the best ``QDS`` can do: perfect sub-questions, perfect sub-answers);
- ``hops within k``: every hop needs at most k articles (beyond that no top-k query can hold them,
  whatever it says) — the fan-out bound;
- ``per name``: perfect QDS whose hops after the first retrieve once per person they start from
  (at most ``--fan-out`` people a hop; the sub-question with that one name, top k each), as the
  runtime does with ``fan_out`` set: each person's article must be in their own query's top k. A
  first hop anchored on an attribute ("the person whose hobby is …") names nobody, so it stays
  one query;
- the articles a question needs (median) and the sub-questions a perfect decomposition writes.

With ``--predictions``, an eval of these questions is split the same way: its F1 where one
retrieval already holds every needed article and elsewhere (what the reader loses against what
retrieval loses), and how many of its answers list several names.

    python examples/research/phantomwiki/phantomwiki_reach.py --data ../shared/data/phantomwiki/phantomwiki-dev.jsonl \\
        --corpus ../shared/data/phantomwiki/phantomwiki-dev-corpus.jsonl --index runs/pw_wf/index_eval --k 3 5 --fan-out 5

The chains are checked against the gold answers first: the share that reproduces them is printed
(a parse that misread the world would show there).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

_CHECKOUT = Path(__file__).resolve().parents[3]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

FACT = re.compile(r"The (date of birth|[a-z]+) of (.+?) (?:is|are) (.+)\.$")
ATTRIBUTES = ("date of birth", "occupation", "hobby", "gender")
# a relation word in a question → the article keys that list it (singular and plural lines)
RELATIONS = {"friend": ("friend", "friends"), "sister": ("sister", "sisters"),
             "brother": ("brother", "brothers"), "sibling": ("sister", "sisters", "brother", "brothers"),
             "son": ("son", "sons"), "daughter": ("daughter", "daughters"),
             "child": ("son", "sons", "daughter", "daughters"), "mother": ("mother",), "father": ("father",),
             "parent": ("mother", "father"), "husband": ("husband",), "wife": ("wife",)}
SINGULAR = {f"{r}s": r for r in RELATIONS} | {"wives": "wife", "children": "child"}
LINK = re.compile(r"^the ([a-z]+) of (.+)$")
ANCHOR_BY_ATTRIBUTE = re.compile(r"^the person whose (date of birth|occupation|hobby|gender) is (.+)$")


@dataclass
class Person:
    relations: dict[str, list[str]]
    attributes: dict[str, str]


def read_world(corpus: Path) -> dict[str, Person]:
    """Title → the person's relations and attributes, from each article's ``The R of X is/are …``
    lines. A line that names another person than the article's title is an error naming the line."""
    world: dict[str, Person] = {}
    with corpus.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            article = json.loads(line)
            person = world.setdefault(article["title"], Person({}, {}))
            for text in article["text"].splitlines():
                fact = FACT.match(text.strip())
                if not fact:
                    continue
                key, subject, value = fact.groups()
                if subject != article["title"]:
                    raise ValueError(f"{corpus}:{number}: a fact about {subject!r} in {article['title']!r}'s article")
                if key in ATTRIBUTES:
                    person.attributes[key] = value
                else:
                    person.relations.setdefault(key, []).extend(v.strip() for v in value.split(","))
    return world


@dataclass(frozen=True)
class Chain:
    """A question read as: an anchor (a name, or ``(attribute, value)`` for "the person whose …"),
    relations applied inside out, then the asked ``final``: ``("who",)``, ``("attribute", name)``
    or ``("count", relation)``."""

    anchor: str | tuple[str, str]
    relations: tuple[str, ...]
    final: tuple[str, ...]


def parse_question(question: str) -> Chain | None:
    """The chain of a templated PhantomWiki question, or None when it is not one of the forms."""
    question = question.strip()
    if m := re.match(r"^Who is (.+)\?$", question):
        body, final = m.group(1), ("who",)
    elif m := re.match(r"^What is the (date of birth|occupation|hobby|gender) of (.+)\?$", question):
        body, final = m.group(2), ("attribute", m.group(1))
    elif (m := re.match(r"^How many ([a-z]+) does (.+) have\?$", question)) and m.group(1) in SINGULAR:
        body, final = m.group(2), ("count", SINGULAR[m.group(1)])
    else:
        return None
    relations = []
    while not ANCHOR_BY_ATTRIBUTE.match(body) and (link := LINK.match(body)) and link.group(1) in RELATIONS:
        relations.append(link.group(1))
        body = link.group(2)
    anchor = ANCHOR_BY_ATTRIBUTE.match(body)
    return Chain(anchor.groups() if anchor else body, tuple(reversed(relations)), final)


def related(world: dict[str, Person], people: list[str], relation: str) -> list[str]:
    """Everyone ``relation`` of anyone in ``people`` (first-seen order, no repeats)."""
    found: dict[str, None] = {}
    for name in people:
        person = world.get(name)
        for key in RELATIONS[relation]:
            for other in person.relations.get(key, []) if person else []:
                found.setdefault(other, None)
    return list(found)


@dataclass
class Hop:
    sub_question: str   # as a perfect serial decomposer writes it, previous answers filled in
    needs: list[str]    # the people whose articles hold this hop's facts
    answers: list[str]


def plural(relation: str) -> str:
    return {"child": "children", "wife": "wives"}.get(relation, f"{relation}s")


def sub_questions(chain: Chain, answers_of: Callable[[int], str], plural_wording: bool = False) -> list[str]:
    """The sub-questions of a perfect inside-out decomposition of ``chain``, one a hop; a hop
    after the first names the answers of hop k before it as ``answers_of(k)`` (k from 1): the
    names written out, or ``#k`` as a decomposer writes them. ``plural_wording`` asks for people
    as "Who are all the friends of …?" (PhantomWiki's own wording is singular, "Who is the
    friend of …?", and means every friend)."""
    subs: list[str] = []
    if isinstance(chain.anchor, tuple):
        subs.append(f"Who are all the people whose {chain.anchor[0]} is {chain.anchor[1]}?" if plural_wording
                    else f"Who is the person whose {chain.anchor[0]} is {chain.anchor[1]}?")
    subject = lambda: answers_of(len(subs)) if subs else chain.anchor  # noqa: E731
    for relation in chain.relations:
        subs.append(f"Who are all the {plural(relation)} of {subject()}?" if plural_wording
                    else f"Who is the {relation} of {subject()}?")
    if chain.final[0] == "attribute":
        subs.append(f"What is the {chain.final[1]} of {subject()}?")
    elif chain.final[0] == "count":
        subs.append(f"How many {chain.final[1]}s does {subject()} have?")
    return subs


def follow(world: dict[str, Person], chain: Chain) -> list[Hop]:
    """The hops of a perfect inside-out decomposition of ``chain`` and what each needs."""
    needs: list[list[str]] = []
    answers: list[list[str]] = []
    if isinstance(chain.anchor, tuple):
        attribute, value = chain.anchor
        people = [name for name, p in world.items() if p.attributes.get(attribute) == value]
        needs.append(people)
        answers.append(people)
    else:
        people = [chain.anchor]
    for relation in chain.relations:
        found = related(world, people, relation)
        needs.append(people)
        answers.append(found)
        people = found
    if chain.final[0] == "attribute":
        needs.append(people)
        answers.append(list(dict.fromkeys(world[n].attributes.get(chain.final[1], "") for n in people if n in world)))
    elif chain.final[0] == "count":
        needs.append(people)
        answers.append(list(dict.fromkeys(str(len(related(world, [n], chain.final[1]))) for n in people)))
    texts = sub_questions(chain, lambda k: ", ".join(answers[k - 1]))
    return [Hop(text, need, found) for text, need, found in zip(texts, needs, answers, strict=True)]


def final_answers(hops: list[Hop], chain: Chain) -> list[str]:
    return hops[-1].answers if hops else [chain.anchor] if isinstance(chain.anchor, str) else []


def reached(ranked: list[str], titles: set[str], k: int) -> bool:
    """Whether every article in ``titles`` (a world's articles are titled by their person) is
    among the first ``k`` of a query's ``ranked`` titles."""
    return titles <= set(ranked[:k])


def per_name_queries(chain: Chain, hops: list[Hop]) -> list[list[tuple[str, str]]]:
    """Each hop's (person, query) pairs when a hop after the first retrieves once per person it
    starts from, the sub-question naming that person alone; the first hop keeps its one query."""
    pairs = []
    for index, hop in enumerate(hops):
        if index == 0:
            pairs.append([(name, hop.sub_question) for name in hop.needs])
        else:
            pairs.append([(name, sub_questions(chain, lambda k, name=name: name)[index]) for name in hop.needs])
    return pairs


def measure(records: list[dict], world: dict[str, Person], retriever, ks: list[int],
            fan_out: int = 5) -> tuple[dict, float]:
    """Per hops count: the table's figures for each k; and the share of chains that reproduce
    the gold answers."""
    rows: dict[int, dict] = {}
    matches = 0
    deepest = max(ks)

    def ranked(query: str) -> list[str]:  # one search a query, read at every k
        return [doc.title for doc in retriever.search(query, deepest)]

    for record in records:
        chain = parse_question(record["question"])
        if chain is None:
            continue
        hops = follow(world, chain)
        gold = {str(a).strip().lower() for a in record.get("golden_answers", [])}
        matches += {a.lower() for a in final_answers(hops, chain)} == gold
        needed = {n for hop in hops for n in hop.needs}
        row = rows.setdefault(record["metadata"]["hops"], {"questions": 0, "needs": [], "sub_questions": [],
                                                            **{k: {"one": 0, "qds": 0, "within": 0, "per_name": 0}
                                                               for k in ks}})
        row["questions"] += 1
        row["needs"].append(len(needed))
        row["sub_questions"].append(len(hops))
        whole, per_hop = ranked(record["question"]), [ranked(hop.sub_question) for hop in hops]
        later = per_name_queries(chain, hops)[1:]  # the first hop is its one query, searched above
        # a hop past the cap retrieves for its first fan_out people only, so it cannot reach all
        fits = all(len(pairs) <= fan_out for pairs in later)
        per_name = [[(name, ranked(query)) for name, query in pairs] for pairs in later] if fits else []
        for k in ks:
            row[k]["one"] += reached(whole, needed, k)
            row[k]["qds"] += all(reached(found, set(hop.needs), k) for found, hop in zip(per_hop, hops))
            row[k]["within"] += all(len(hop.needs) <= k for hop in hops)
            row[k]["per_name"] += fits and reached(per_hop[0], set(hops[0].needs), k) and all(
                reached(found, {name}, k) for pairs in per_name for name, found in pairs)
    return rows, matches / max(1, sum(r["questions"] for r in rows.values()))


def table(rows: dict, ks: list[int]) -> str:
    head = "| hops | questions | articles needed (median) | sub-questions | " + " | ".join(
        f"one retrieval @{k} | perfect QDS @{k} | hops within {k} | per name @{k}" for k in ks) + " |"
    lines = [head, "|" + "---|" * (4 + 4 * len(ks))]
    for hops in sorted(rows):
        r = rows[hops]
        n = r["questions"]
        cells = [f"{100 * r[k][key] / n:.0f}%" for k in ks for key in ("one", "qds", "within", "per_name")]
        lines.append(f"| {hops} | {n} | {statistics.median(r['needs']):g} | {statistics.median(r['sub_questions']):g} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def reader_table(records: list[dict], world: dict[str, Person], retriever, k: int,
                 predictions: list[dict]) -> str:
    """Splits retrieval's failures from the reader's: an eval's F1 by hops, on the questions whose
    every needed article one retrieval of the whole question holds at top ``k`` and on the rest,
    and how many of its answers list several items (the golds list several for most questions)."""
    from ragteam.nodes.parsing import list_items

    by_id = {r["id"]: r for r in records if "id" in r}
    cells: dict[int, dict] = {}
    for prediction in predictions:
        record = by_id.get(prediction["id"])
        chain = parse_question(record["question"]) if record else None
        if chain is None:
            continue
        needed = {n for hop in follow(world, chain) for n in hop.needs}
        found = [doc.title for doc in retriever.search(record["question"], k)]
        cell = cells.setdefault(record["metadata"]["hops"], {True: [], False: [], "lists": 0, "golds": 0})
        cell[reached(found, needed, k)].append(prediction["f1"])
        cell["lists"] += len(list_items(prediction["prediction"])) > 1
        cell["golds"] += len(prediction["golds"]) > 1
    mean = lambda scores: f"{100 * statistics.mean(scores):.1f} ({len(scores)})" if scores else "–"  # noqa: E731
    lines = [f"| hops | F1 where one retrieval @{k} holds the evidence (questions) | F1 elsewhere | "
             "answers listing several | golds listing several |", "|---|---|---|---|---|"]
    for hops in sorted(cells):
        c = cells[hops]
        lines.append(f"| {hops} | {mean(c[True])} | {mean(c[False])} | {c['lists']} | {c['golds']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="PhantomWiki questions (JSONL)")
    parser.add_argument("--corpus", required=True, help="the same world's articles (JSONL)")
    parser.add_argument("--index", required=True, help="a built index of that corpus (ragteam index)")
    parser.add_argument("--k", type=int, nargs="+", default=[3], help="documents per retrieval")
    parser.add_argument("--fan-out", type=int, default=5, help="most people a hop retrieves for, one by one")
    parser.add_argument("--predictions", help="an eval's predictions.jsonl on these questions: its F1 where "
                        "one retrieval holds the evidence and elsewhere, at the first --k")
    args = parser.parse_args(argv)

    from ragteam.stores.jsonl import read_records
    from ragteam.stores.index import open_retriever

    world = read_world(Path(args.corpus))
    records, retriever = read_records(Path(args.data)), open_retriever(args.index)
    rows, agree = measure(records, world, retriever, args.k, args.fan_out)
    print(f"chains reproducing the gold answers: {100 * agree:.1f}%")
    print(table(rows, args.k))
    if args.predictions:
        print(reader_table(records, world, retriever, args.k[0], read_records(Path(args.predictions))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
