"""QA datasets: questions with gold answers, read from the layouts RAG research uses.

- FlashRAG JSONL: ``{"id", "question", "golden_answers": [...], "metadata": {...}}``
- plain JSON or JSONL: ``{"question", "answer"}`` (``answer`` a string or a list; ``id`` optional)
- HotpotQA JSON: a list of ``{"_id", "question", "answer", "context", ...}`` (its contexts are a
  corpus too: ``stores.corpus.read_hotpot_json``)
- PhantomWiki: FlashRAG JSONL whose ``metadata.all_answers_required`` is true, or the output
  folder of the ``phantom-wiki`` generator (``questions.json``, or ``questions/type<N>.json``, a
  list of ``{"id", "question", "answer": [...], "prolog": {"query": [...]}, "type", ...}``; its
  ``articles.json`` is the corpus: ``stores.corpus``). Its questions get ``metadata.type``
  ``hops-N`` (N = the clauses of the Prolog query) and are scored as sets (``QAExample.metric``).

A bad record raises ``DatasetError`` naming the file and line (JSONL) or record index (JSON);
with ``skip_bad=True`` it is skipped and counted instead. A record needs a non-empty question and
at least one non-blank gold answer (blank alternatives are dropped: an empty prediction must not
match them). A file with no usable examples is an error, not an evaluation of n=0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ragteam.stores.text import clean_text
from ragteam.stores.corpus import parse_json, read_json_list, utf8_lines


class DatasetError(ValueError):
    pass


@dataclass(frozen=True)
class QAExample:
    """One question with its gold answers (``golds``), as every reader of a dataset returns it;
    ``metadata`` carries the rest of the record (e.g. ``type``)."""

    id: str
    question: str
    golds: tuple[str, ...]
    metadata: dict = field(default_factory=dict, compare=False, hash=False)
    # how an answer is scored (graphs.eval.metrics.score): "max" = the golds are alternatives, the
    # best match counts; "set" = the golds are one answer set, every item required (PhantomWiki)
    metric: str = "max"


@dataclass
class Dataset:
    name: str
    examples: list[QAExample]
    skipped: list[str] = field(default_factory=list)  # "file:line: reason" of skipped records


def _example(record, where: str, fallback_id: str) -> QAExample:
    if not isinstance(record, dict):
        raise DatasetError(f"{where}: expected an object, got {type(record).__name__}")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DatasetError(f"{where}: missing or empty 'question'")
    golds = record.get("golden_answers", record.get("answer", record.get("answers")))
    if isinstance(golds, str):
        golds = [golds]
    if not isinstance(golds, list) or not golds or not all(isinstance(g, str) for g in golds):
        raise DatasetError(f"{where}: needs 'golden_answers' or 'answer' (a string or a list of strings)")
    golds = [gold for gold in golds if gold.strip()]
    if not golds:
        raise DatasetError(f"{where}: empty gold answer(s): every answer is blank")
    metadata = record.get("metadata") or {k: record[k] for k in ("type", "level") if k in record}
    if not isinstance(metadata, dict):
        raise DatasetError(f"{where}: 'metadata' must be an object, got {type(metadata).__name__}")
    doc_id = record.get("id", record.get("_id", fallback_id))
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or not str(doc_id).strip():
        raise DatasetError(f"{where}: 'id' must be a non-empty string or an integer, got {doc_id!r}"[:300])
    return QAExample(id=clean_text(str(doc_id)), question=clean_text(question.strip()),
                     golds=tuple(map(clean_text, golds)), metadata=metadata,
                     metric="set" if metadata.get("all_answers_required") is True else "max")


PHANTOM_QUESTIONS = "questions.json"


def _from_phantom(record, where: str):
    """A ``phantom-wiki`` question as the FlashRAG record the converted PhantomWiki files hold:
    the answer list is the gold set, ``hops-N`` its type."""
    if not isinstance(record, dict):
        return record  # _example names the problem
    answers = record.get("answer")
    if not isinstance(answers, list) or not all(
            isinstance(a, str) or (isinstance(a, int) and not isinstance(a, bool)) for a in answers):
        raise DatasetError(f"{where}: PhantomWiki 'answer' must be a list of strings, got {answers!r}"[:300])
    if not answers:
        raise DatasetError(f"{where}: PhantomWiki 'answer' is an empty list: nothing to score against")
    prolog = record.get("prolog")
    query = prolog.get("query") if isinstance(prolog, dict) else None
    query = query if isinstance(query, list) else []
    # one Prolog clause per reasoning step (the aggregate_all of "How many" counts as one)
    hops = len(query) or (record.get("difficulty") if type(record.get("difficulty")) is int else 0)
    question = record.get("question")
    counted = isinstance(question, str) and question.lower().startswith("how many")
    metadata = {**({"type": f"hops-{hops}", "hops": hops} if hops > 0 else {}),
                "template": record.get("type"),
                "aggregation": counted or any("aggregate_all" in str(clause) for clause in query),
                "all_answers_required": True}
    return {"id": record.get("id"), "question": question, "golden_answers": [str(a) for a in answers],
            "metadata": metadata}


def _is_phantom(records: list) -> bool:
    """``phantom-wiki``'s own question records carry the Prolog query they were drawn from."""
    return bool(records) and isinstance(records[0], dict) and "prolog" in records[0]


def _phantom_folder_records(folder: Path) -> list[tuple[str, object]]:
    """``(where, record)`` of a ``phantom-wiki`` output folder: ``questions.json`` (question format
    json), else ``questions/type<N>.json`` (json_by_type) in type order. Read whole, so a missing
    or unreadable file is an error even under ``skip_bad``, never one skipped record."""
    single = folder / PHANTOM_QUESTIONS
    by_type = sorted((folder / "questions").glob("type*.json"),
                     key=lambda p: (len(p.stem), p.stem))  # type2 before type10
    files = [single] if single.is_file() else by_type
    if not files:
        raise DatasetError(f"{folder}: a directory without {PHANTOM_QUESTIONS} or questions/type<N>.json "
                           "(expected a phantom-wiki output folder, or give a dataset file)")
    return [(f"{path}: record {i}", record) for path in files
            for i, record in enumerate(read_json_list(path, DatasetError, "PhantomWiki questions"))]


def read_dataset(path: str | Path, skip_bad: bool = False) -> Dataset:
    """QA examples from FlashRAG JSONL, ``{question, answer}`` JSON/JSONL, HotpotQA JSON or a
    PhantomWiki output folder; a bad record is an error naming file and line (``skip_bad``:
    skipped and counted instead)."""
    path = Path(path)
    phantom = path.is_dir()
    if not path.is_file() and not phantom:
        raise DatasetError(f"{path} is not a regular file (a FIFO, device or socket); give a dataset file"
                           if path.exists() else f"{path}: no such dataset file")
    dataset = Dataset(name=path.name if phantom else path.stem, examples=[])
    first_seen: dict[str, str] = {}
    if phantom:
        numbered = _phantom_folder_records(path)
    elif path.suffix.lower() == ".json":
        records = read_json_list(path, DatasetError, "records")
        phantom = _is_phantom(records)
        numbered = ((f"{path}: record {i}", record) for i, record in enumerate(records))
    else:
        numbered = _jsonl_records(path)
    for where, record in numbered:
        try:
            if isinstance(record, DatasetError):
                raise record
            if phantom:
                record = _from_phantom(record, where)
            example = _example(record, where, fallback_id=str(len(dataset.examples)))
            if example.id in first_seen:
                raise DatasetError(f"{where}: duplicate example id {example.id!r} (first at "
                                   f"{first_seen[example.id]})")
            first_seen[example.id] = where
            dataset.examples.append(example)
        except DatasetError as error:
            if not skip_bad:
                raise
            dataset.skipped.append(str(error))
    if not dataset.examples:
        skipped = f" ({len(dataset.skipped)} bad record(s) skipped)" if dataset.skipped else ""
        raise DatasetError(f"{path}: no examples in this dataset{skipped}")
    return dataset


def _jsonl_records(path: Path):
    """``(where, record)``; a malformed line yields its error, for ``skip_bad`` to skip."""
    for line_no, line in utf8_lines(path, DatasetError):  # bad bytes: the whole file is suspect
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            record = parse_json(line, where, DatasetError)
        except DatasetError as error:
            record = error
        yield where, record
