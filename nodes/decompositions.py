"""Given decompositions: per question, the chain of sub-questions a serial decomposer should
write (e.g. the hops a dataset's question template spells out, ``examples/research/phantomwiki/phantomwiki_chains.py``).

The file is JSON Lines of ``{"id", "question", "sub_questions": [...]}``: two or more non-empty
sub-questions, a later one naming only earlier answers (#1 … #k-1), as the serial decomposer's
parser accepts them. The fine-tune teaches them by ``id`` (``sft_graph.py
--select given-decompositions``); a run writes them as the decomposer's reply by ``question``
(``Settings.written.decompositions``, ``nodes.written``). A bad line is a ``ValueError`` naming file and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ragteam.nodes.parsing import references
from ragteam.stores.jsonl import read_lines


@dataclass(frozen=True)
class GivenDecomposition:
    id: str
    question: str
    sub_questions: tuple[str, ...]


def read_decompositions(path: str | Path) -> list[GivenDecomposition]:
    """Every chain of ``path``, checked; a ``ValueError`` naming file and line for a bad one.
    A file a person writes has no torn last line: a malformed one is an error like any other,
    and so is a file with no chain at all."""
    lines = read_lines(path)
    if lines.torn_tail:
        raise ValueError(f"{path}: its last line is not JSON (one given decomposition per line)")
    found, seen, questions = [], {}, {}
    for line_no, record in lines.records:
        where = f"{path}:{line_no}"
        if not isinstance(record, dict) or not all(isinstance(record.get(k), str) and record[k].strip()
                                                   for k in ("id", "question")):
            raise ValueError(f"{where}: not a given decomposition (an object with a string 'id' and 'question')")
        steps = record.get("sub_questions")
        if not isinstance(steps, list) or len(steps) < 2 or not all(isinstance(q, str) and q.strip() for q in steps):
            raise ValueError(f"{where}: 'sub_questions' must list at least two non-empty sub-questions")
        for index, step in enumerate(steps):
            if any(not 1 <= n <= index for n in references(step)):
                raise ValueError(f"{where}: sub-question {index + 1} names an answer that is not an earlier one")
        if record["id"] in seen:
            raise ValueError(f"{where}: a second decomposition of question {record['id']!r} (first at line "
                             f"{seen[record['id']]})")
        question = record["question"].strip()
        if question in questions:  # a run finds the chain to write by the question's text
            raise ValueError(f"{where}: a second decomposition of the question of line {questions[question]}")
        seen[record["id"]], questions[question] = line_no, line_no
        found.append(GivenDecomposition(record["id"], record["question"], tuple(steps)))
    if not found:
        raise ValueError(f"{path}: no given decompositions in this file")
    return found


@lru_cache(maxsize=8)
def decompositions_by_question(path: str) -> dict[str, tuple[str, ...]]:
    """``path``'s decompositions keyed by question text (read once per path and process: every
    run of an evaluation asks for it)."""
    return {d.question.strip(): d.sub_questions for d in read_decompositions(path)}
