"""QA datasets: questions with gold answers, read from the layouts RAG research uses.

- FlashRAG JSONL: ``{"id", "question", "golden_answers": [...], "metadata": {...}}``
- plain JSON or JSONL: ``{"question", "answer"}`` (``answer`` a string or a list; ``id`` optional)
- HotpotQA JSON: a list of ``{"_id", "question", "answer", "context", ...}`` (its contexts are a
  corpus too: ``stores.corpus.read_hotpot_json``)

A bad record raises ``DatasetError`` naming the file and line (JSONL) or record index (JSON);
with ``skip_bad=True`` it is skipped and counted instead. A record needs a non-empty question and
at least one non-blank gold answer (blank alternatives are dropped: an empty prediction must not
match them). A file with no usable examples is an error, not an evaluation of n=0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stores.text import clean_text
from stores.corpus import parse_json, read_json_list, utf8_lines


class DatasetError(ValueError):
    pass


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    golds: tuple[str, ...]
    metadata: dict = field(default_factory=dict, compare=False, hash=False)


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
                     golds=tuple(map(clean_text, golds)), metadata=metadata)


def read_dataset(path: str | Path, skip_bad: bool = False) -> Dataset:
    """QA examples from FlashRAG JSONL, ``{question, answer}`` JSON/JSONL or HotpotQA JSON; a bad
    record is an error naming file and line (``skip_bad``: skipped and counted instead)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: {'a directory, not a dataset file' if path.is_dir() else 'no such dataset file'}")
    dataset = Dataset(name=path.stem, examples=[])
    first_seen: dict[str, str] = {}
    if path.suffix.lower() == ".json":
        records = read_json_list(path, DatasetError, "records")
        numbered = ((f"{path}: record {i}", record) for i, record in enumerate(records))
    else:
        numbered = _jsonl_records(path)
    for where, record in numbered:
        try:
            if isinstance(record, DatasetError):
                raise record
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
