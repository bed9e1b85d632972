"""Reading corpora into ``Document`` records, with errors that name the file and line.

Formats (chosen by file name, see ``read_corpus``):
- JSONL: one ``{"id", "title"?, "text"}`` object per line (``contents`` is accepted for ``text``,
  as FlashRAG/Pyserini corpora write it).
- DPR TSV: ``id<TAB>text<TAB>title`` with the header row of ``psgs_w100.tsv``.
- HotpotQA JSON: a list of examples whose ``context`` paragraphs are pooled and de-duplicated by title.
- PhantomWiki ``articles.json``: a list of ``{"title", "article"}``, one per person (ids ``pw<n>``),
  read from the file or from the ``phantom-wiki`` output folder that holds it.

JSONL and TSV alike need a non-empty ``id`` and ``text``. JSONL ids may be integers, read as their
decimal string; any other non-string ``id``/``text`` is an error, never stringified into 'None'.
A JSONL ``title`` may be a string, an integer or null/absent (no title). HotpotQA titles and
sentences must be strings. Files must be UTF-8.
Every problem is a ``CorpusError`` reading ``file:line: reason`` (``file: example N: reason``
for HotpotQA JSON, whose records have no line of their own).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from ragteam.stores.documents import Document
from ragteam.stores.text import clean_text
from ragteam.stores.user_files import GIB, open_regular, read_regular_bytes

# DPR passages are ~100 words, but csv's default 128 KiB field cap rejects any longer document;
# a few MiB admits real long texts while still stopping a runaway unclosed quote early.
TSV_FIELD_LIMIT = 8 * 1024 * 1024
MAX_JSON_BYTES = 8 * GIB  # a JSON file is parsed whole: anything larger is not a corpus or dataset


class CorpusError(ValueError):
    """A corpus record that cannot be read; the message names file and line."""


Located = tuple[str, Document]  # ("file:line", document): where a document came from, for errors


def read_corpus(path: str | Path) -> list[Document]:
    """One corpus file's documents; a file with none is an error."""
    documents = [doc for _, doc in iter_corpus(path)]
    if not documents:
        raise CorpusError(f"{path}: no documents in this corpus file")
    return documents


def iter_corpus(path: str | Path) -> Iterator[Located]:
    """A corpus file's documents with the ``file:line`` each was read from, by format."""
    path = corpus_file(path)
    if path.is_dir():
        raise CorpusError(f"{path}: a directory, not a corpus file (nor a phantom-wiki output folder "
                          f"with {PHANTOM_ARTICLES})")
    name = path.name.lower()
    readers = {(".jsonl", ".jsonl.txt", ".ndjson"): _iter_jsonl_corpus, (".tsv",): _iter_dpr_tsv,
               (".json",): _iter_json_corpus}
    reader = next((r for suffixes, r in readers.items() if name.endswith(suffixes)), None)
    if reader is None:
        raise CorpusError(f"{path}: unknown corpus format (expected .jsonl, .tsv, HotpotQA .json "
                          "or a PhantomWiki articles.json)")
    if not path.is_file():
        raise CorpusError(f"{path}: no such corpus file")
    return reader(path)


PHANTOM_ARTICLES = "articles.json"


def corpus_file(path: str | Path) -> Path:
    """The file a corpus path names: a ``phantom-wiki`` output folder stands for its
    ``articles.json`` (so an index fingerprints the file, not the folder)."""
    path = Path(path)
    return path / PHANTOM_ARTICLES if (path / PHANTOM_ARTICLES).is_file() else path


def read_corpora(paths: Sequence[str | Path], chunk_words: int | None = None,
                 chunk_overlap: int = 20) -> list[Document]:
    """Several corpus files as one list of (optionally chunked) documents with unique ids.
    Stores key documents by id, so a repeated id would silently overwrite: it is an error at
    its second occurrence, as is a file with no documents. Streams, keeping no per-document
    location, so a 21M-passage corpus costs no more memory than its documents."""
    if chunk_words:
        chunk_documents([], chunk_words, chunk_overlap)  # check the window before reading
    documents: list[Document] = []
    seen: set[str] = set()
    for path in paths:
        before = len(documents)
        for where, doc in _pieces(path, chunk_words, chunk_overlap):
            if doc.id in seen:
                first = _first_location(paths, doc.id, chunk_words, chunk_overlap)
                raise CorpusError(f"{where}: duplicate document id {doc.id!r} (first at {first})")
            seen.add(doc.id)
            documents.append(doc)
        if len(documents) == before:
            raise CorpusError(f"{path}: no documents in this corpus file")
    return documents


def _pieces(path, chunk_words: int | None, chunk_overlap: int) -> Iterator[Located]:
    for where, doc in iter_corpus(path):
        if not chunk_words:
            yield where, doc
            continue
        for chunk in chunk_documents([doc], chunk_words, chunk_overlap):
            yield where, chunk


def _first_location(paths, doc_id: str, chunk_words: int | None, chunk_overlap: int) -> str:
    """Only on the error path: read again to find where a repeated id was first seen."""
    return next(where for path in paths for where, doc in _pieces(path, chunk_words, chunk_overlap)
                if doc.id == doc_id)


def utf8_lines(path: Path, error: type[ValueError]) -> Iterator[tuple[int, str]]:
    """``(line_no, line)`` of a UTF-8 file. Lines are decoded one at a time (not in buffered
    chunks) so a bad byte is reported on its own line, as ``error``."""
    try:
        handle = open_regular(path, "text file")
    except ValueError as bad:
        raise error(str(bad)) from None
    with handle:
        for line_no, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as bad:
                raise error(f"{path}:{line_no}: not UTF-8 text (byte {raw[bad.start]:#04x} at "
                            f"column {bad.start + 1}); re-save the file as UTF-8") from None
            yield line_no, line.removeprefix("\ufeff") if line_no == 1 else line  # a BOM is not text


def parse_json(text: str, where: str, error: type[ValueError]):
    """``json.loads`` whose failures, including nesting too deep for the parser, are ``error``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as bad:
        raise error(f"{where}: invalid JSON ({bad.msg})") from None
    except RecursionError:
        raise error(f"{where}: invalid JSON (nested too deeply)") from None
    except ValueError as bad:  # e.g. an integer longer than Python converts (4,300 digits)
        raise error(f"{where}: invalid JSON ({str(bad)[:120]})") from None


def read_jsonl_corpus(path: str | Path) -> list[Document]:
    """Records ``{"id", "title", "text"}``, one JSON object per line; ``title`` may be absent."""
    return [doc for _, doc in _iter_jsonl_corpus(Path(path))]


def _iter_jsonl_corpus(path: Path) -> Iterator[Located]:
    for line_no, line in utf8_lines(path, CorpusError):
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        record = parse_json(line, where, CorpusError)
        if not isinstance(record, dict):
            raise CorpusError(f"{where}: expected an object, got {type(record).__name__}")
        if "text" not in record and "contents" in record:
            record["text"] = record["contents"]
        missing = [key for key in ("id", "text") if key not in record]
        if missing:
            raise CorpusError(f"{where}: missing field(s) {', '.join(missing)}")
        yield where, Document(id=_field(record, "id", where, (str, int)),
                              title=_field(record, "title", where, (str, int), optional=True),
                              text=_field(record, "text", where, (str,)))


def _field(record: dict, key: str, where: str, types: tuple[type, ...], optional: bool = False) -> str:
    """A field as a string; wrong types are errors rather than ``str()``-ed into ids like 'None'."""
    value = record.get(key)
    if value is None and optional:
        return ""
    if isinstance(value, bool) or not isinstance(value, types):  # bool is an int: refuse it anyway
        allowed = " or ".join("an integer" if t is int else "a string" for t in types)
        raise CorpusError(f"{where}: '{key}' must be {allowed}, got {_json_type(value)}")
    if optional:
        return clean_text(str(value))
    if not str(value).strip():
        raise CorpusError(f"{where}: empty '{key}'")
    return clean_text(str(value))


def _json_type(value) -> str:
    names = {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
             str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def _iter_dpr_tsv(path: Path) -> Iterator[Located]:
    for line_no, row in _tsv_rows(path):
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
        yield f"{path}:{line_no}", Document(id=doc_id.strip(), title=title, text=text)


def _tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Rows with the line each starts on (a quoted field may span lines); csv errors name it."""
    if csv.field_size_limit() < TSV_FIELD_LIMIT:
        csv.field_size_limit(TSV_FIELD_LIMIT)
    # utf8_lines keeps line endings, which is what csv expects of a file opened with newline="".
    rows = csv.reader((line for _, line in utf8_lines(path, CorpusError)), delimiter="\t",
                      quoting=csv.QUOTE_MINIMAL)
    while True:
        start = rows.line_num + 1
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as bad:
            raise CorpusError(f"{path}:{start}: unreadable TSV row ({bad})") from None
        yield start, row


def read_json_list(path: Path, error: type[ValueError], what: str) -> list:
    """A JSON file holding one list; malformed JSON or bad bytes name the file and line."""
    try:
        raw = read_regular_bytes(path, MAX_JSON_BYTES, f"{what} file")
    except ValueError as bad:
        raise error(str(bad)) from None
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as bad:
        line_no = raw.count(b"\n", 0, bad.start) + 1
        raise error(f"{path}:{line_no}: not UTF-8 text (byte {raw[bad.start]:#04x}); "
                    "re-save the file as UTF-8") from None
    try:
        records = json.loads(text)
    except json.JSONDecodeError as bad:
        raise error(f"{path}:{bad.lineno}: invalid JSON ({bad.msg})") from None
    except RecursionError:
        raise error(f"{path}: invalid JSON (nested too deeply)") from None
    except ValueError as bad:  # e.g. an integer longer than Python converts (4,300 digits)
        raise error(f"{path}: invalid JSON ({str(bad)[:120]})") from None
    if not isinstance(records, list):
        raise error(f"{path}: expected a list of {what}")
    return records


def read_hotpot_json(path: str | Path) -> list[Document]:
    path = Path(path)
    return [doc for _, doc in _hotpot_documents(path, read_json_list(path, CorpusError, "HotpotQA examples"))]


def _iter_json_corpus(path: Path) -> Iterator[Located]:
    """A JSON list: PhantomWiki articles when its first record has an ``article``, else HotpotQA
    examples (told apart by content, so a renamed ``articles.json`` still reads)."""
    records = read_json_list(path, CorpusError, "HotpotQA examples or PhantomWiki articles")
    if records and isinstance(records[0], dict) and "article" in records[0]:
        yield from _phantom_articles(path, records)
    else:
        yield from _hotpot_documents(path, records)


def _phantom_articles(path: Path, articles: list) -> Iterator[Located]:
    """``phantom-wiki``'s ``{"title", "article", "facts"?}`` records; the article text already
    starts with its title as a heading."""
    for index, record in enumerate(articles):
        where = f"{path}: article {index}"
        if not isinstance(record, dict):
            raise CorpusError(f"{where}: expected an object, got {_json_type(record)}")
        missing = [key for key in ("title", "article") if key not in record]
        if missing:
            raise CorpusError(f"{where}: missing field(s) {', '.join(missing)}")
        yield where, Document(id=f"pw{index}", title=_field(record, "title", where, (str,)),
                              text=_field(record, "article", where, (str,)))


def _hotpot_documents(path: Path, examples: list) -> Iterator[Located]:
    for index, example in enumerate(examples):
        _check_context(example, f"{path}: example {index}")
    for index, doc in _pooled_paragraphs(examples):
        yield f"{path}: example {index}", doc


def _check_context(example, where: str) -> None:
    """``context`` must be ``[[title, [sentence, ...]], ...]`` with strings throughout."""
    context = example.get("context") if isinstance(example, dict) else None
    if not isinstance(context, list) or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[1], list) for p in context):
        raise CorpusError(f"{where} has no [title, [sentences]] context list")
    for number, (title, sentences) in enumerate(context):
        if not isinstance(title, str):
            raise CorpusError(f"{where}: context paragraph {number} has a title that is "
                              f"{_json_type(title)}, not a string")
        if not all(isinstance(sentence, str) for sentence in sentences):
            raise CorpusError(f"{where}: context paragraph {number} ({title!r}) has a sentence "
                              "that is not a string")


def hotpot_paragraphs(examples: list[dict]) -> list[Document]:
    """Pool HotpotQA ``context`` paragraphs across examples, one document per distinct title."""
    return [doc for _, doc in _pooled_paragraphs(examples)]


def _pooled_paragraphs(examples: list[dict]) -> Iterator[tuple[int, Document]]:
    """``(example index, document)`` for each title's first paragraph."""
    seen: set[str] = set()
    for index, example in enumerate(examples):
        for title, sentences in example.get("context", []):
            if title not in seen:
                yield index, Document(id=f"hp{len(seen)}", title=clean_text(title),
                                      text=clean_text("".join(sentences).strip()))
                seen.add(title)


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

