"""Reading corpora into ``Document`` records, with errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from stores.documents import Document


class CorpusError(ValueError):
    """A corpus record that cannot be read; the message names file and line."""


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
            missing = [key for key in ("id", "text") if key not in record]
            if missing:
                raise CorpusError(f"{path}:{line_no}: missing field(s) {', '.join(missing)}")
            yield Document(id=str(record["id"]), title=str(record.get("title", "")),
                           text=str(record["text"]))


def hotpot_paragraphs(examples: list[dict]) -> list[Document]:
    """Pool HotpotQA ``context`` paragraphs across examples, one document per distinct title."""
    seen: dict[str, Document] = {}
    for example in examples:
        for title, sentences in example.get("context", []):
            if title not in seen:
                seen[title] = Document(id=f"hp{len(seen)}", title=title, text="".join(sentences).strip())
    return list(seen.values())
