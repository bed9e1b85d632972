"""Reading corpora into ``Document`` records, with errors that name the file and line.

Formats (chosen by file name, see ``read_corpus``):
- JSONL: one ``{"id", "title"?, "text"}`` object per line (``contents`` is accepted for ``text``,
  as FlashRAG/Pyserini corpora write it).
- DPR TSV: ``id<TAB>text<TAB>title`` with the header row of ``psgs_w100.tsv``.
- HotpotQA JSON: a list of examples whose ``context`` paragraphs are pooled and de-duplicated by title.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterable, Iterator

from stores.documents import Document


class CorpusError(ValueError):
    """A corpus record that cannot be read; the message names file and line."""


def read_corpus(path: str | Path) -> list[Document]:
    path = Path(path)
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.txt", ".ndjson")):
        return read_jsonl_corpus(path)
    if name.endswith(".tsv"):
        return read_dpr_tsv(path)
    if name.endswith(".json"):
        return read_hotpot_json(path)
    raise CorpusError(f"{path}: unknown corpus format (expected .jsonl, .tsv or HotpotQA .json)")


def read_jsonl_corpus(path: str | Path) -> list[Document]:
    """Records ``{"id", "title", "text"}``, one JSON object per line; ``title`` may be absent."""
    return list(_iter_jsonl_corpus(Path(path)))


def _iter_jsonl_corpus(path: Path) -> Iterator[Document]:
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise CorpusError(f"{path}:{line_no}: invalid JSON ({error.msg})") from None
            if not isinstance(record, dict):
                raise CorpusError(f"{path}:{line_no}: expected an object, got {type(record).__name__}")
            if "text" not in record and "contents" in record:
                record["text"] = record["contents"]
            missing = [key for key in ("id", "text") if key not in record]
            if missing:
                raise CorpusError(f"{path}:{line_no}: missing field(s) {', '.join(missing)}")
            yield Document(id=str(record["id"]), title=str(record.get("title", "")),
                           text=str(record["text"]))


def read_dpr_tsv(path: str | Path) -> list[Document]:
    """The DPR passage layout: ``id<TAB>text<TAB>title``, first row a header."""
    path = Path(path)
    documents = []
    with open(path, encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_MINIMAL)
        for line_no, row in enumerate(rows, 1):
            if line_no == 1 and [c.strip().lower() for c in row[:3]] == ["id", "text", "title"]:
                continue
            if not row or not any(cell.strip() for cell in row):
                continue
            if len(row) != 3:
                raise CorpusError(f"{path}:{line_no}: expected 3 tab-separated fields "
                                  f"(id, text, title), found {len(row)}")
            doc_id, text, title = row
            if not doc_id.strip() or not text.strip():
                raise CorpusError(f"{path}:{line_no}: empty id or text")
            documents.append(Document(id=doc_id.strip(), title=title, text=text))
    return documents


def read_json_list(path: Path, error: type[ValueError], what: str) -> list:
    """A JSON file holding one list; malformed JSON names the file and line."""
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as bad:
        raise error(f"{path}:{bad.lineno}: invalid JSON ({bad.msg})") from None
    if not isinstance(records, list):
        raise error(f"{path}: expected a list of {what}")
    return records


def read_hotpot_json(path: str | Path) -> list[Document]:
    path = Path(path)
    examples = read_json_list(path, CorpusError, "HotpotQA examples")
    for index, example in enumerate(examples):
        context = example.get("context") if isinstance(example, dict) else None
        if not isinstance(context, list) or not all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[1], list) for p in context):
            raise CorpusError(f"{path}: example {index} has no [title, [sentences]] context list")
    return hotpot_paragraphs(examples)


def hotpot_paragraphs(examples: list[dict]) -> list[Document]:
    """Pool HotpotQA ``context`` paragraphs across examples, one document per distinct title."""
    seen: dict[str, Document] = {}
    for example in examples:
        for title, sentences in example.get("context", []):
            if title not in seen:
                seen[title] = Document(id=f"hp{len(seen)}", title=title, text="".join(sentences).strip())
    return list(seen.values())


def chunk_documents(documents: Iterable[Document], max_words: int = 100,
                    overlap: int = 20) -> list[Document]:
    """Split long texts into windows of ``max_words`` words that overlap by ``overlap`` words
    (DPR's passages are 100-word windows). Short documents pass through unchanged; chunk ids are
    ``<id>#<n>``."""
    if not 0 <= overlap < max_words:
        raise ValueError("chunking needs 0 <= overlap < max_words")
    chunks = []
    for doc in documents:
        words = doc.text.split()
        if len(words) <= max_words:
            chunks.append(doc)
            continue
        step = max_words - overlap
        for n, start in enumerate(range(0, len(words) - overlap, step)):
            chunks.append(Document(id=f"{doc.id}#{n}", title=doc.title,
                                   text=" ".join(words[start:start + max_words])))
    return chunks


def require_unique_ids(documents: list[Document], source: str) -> list[Document]:
    """Stores key documents by id: a repeated id would silently overwrite, so refuse it."""
    seen: set[str] = set()
    for doc in documents:
        if doc.id in seen:
            raise CorpusError(f"{source}: duplicate document id {doc.id!r}")
        seen.add(doc.id)
    return documents
