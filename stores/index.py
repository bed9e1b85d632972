"""Building and opening retrieval indexes on disk.

An index directory holds ``manifest.json`` (what it is and how to reopen it), ``documents.jsonl``,
and ``bm25/`` and/or ``chroma/``. Builds are atomic and resumable: everything is written into a
sibling ``<out>.partial`` directory whose ``build.json`` fingerprints the inputs; the manifest is
written last, and only then is the finished directory swapped in for the old one. A build that
fails or is killed leaves the previous index untouched, and rerunning the same command resumes
the partial build (documents already embedded are not embedded again).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

from stores.bm25_store import BM25Store
from stores.corpus import chunk_documents, read_corpus, read_jsonl_corpus, require_unique_ids
from stores.documents import Document
from stores.embeddings import EmbedderConfig, load_embedder
from stores.hybrid_store import HybridStore

KINDS = ("bm25", "chroma", "hybrid")
MANIFEST = "manifest.json"


def load_corpora(paths: Sequence[str | Path], chunk_words: int | None = None,
                 chunk_overlap: int = 20) -> list[Document]:
    documents: list[Document] = []
    for path in paths:
        documents += read_corpus(path)
    if chunk_words:
        documents = chunk_documents(documents, chunk_words, chunk_overlap)
    return require_unique_ids(documents, ", ".join(map(str, paths)))


def build_index(corpus: Sequence[str | Path], kind: str, out: str | Path,
                embedder: EmbedderConfig = EmbedderConfig(), chunk_words: int | None = None,
                chunk_overlap: int = 20, progress: bool = False,
                on_batch: Callable[[int], None] | None = None) -> dict:
    """Build (or resume building) an index and swap it in at ``out``. Returns its manifest,
    with ``embedded`` = how many documents this call embedded."""
    if kind not in KINDS:
        raise ValueError(f"unknown index kind {kind!r}; choose one of {', '.join(KINDS)}")
    out = Path(out)
    started = time.perf_counter()
    documents = load_corpora(corpus, chunk_words, chunk_overlap)
    spec = {"kind": kind, "corpus": [str(Path(p).resolve()) for p in corpus],
            "corpus_stats": [_file_stats(p) for p in corpus], "chunk_words": chunk_words,
            "chunk_overlap": chunk_overlap, "embedder": asdict(embedder) if kind != "bm25" else None}
    staging = _staging_dir(out, spec)
    _write_documents(documents, staging / "documents.jsonl")
    embedded = 0
    if kind in ("bm25", "hybrid"):
        BM25Store(documents).save(staging / "bm25")
    if kind in ("chroma", "hybrid"):
        from stores.chroma_store import ChromaStore, release_clients
        store = ChromaStore.persistent(str(staging / "chroma"), load_embedder(embedder))
        embedded = store.add(documents, progress=progress, on_batch=on_batch)
        release_clients()  # the directory is about to move; drop chroma's cached handle on it
    manifest = {**spec, "n_documents": len(documents), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "build_seconds": round(time.perf_counter() - started, 3)}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
    _swap_in(staging, out)
    return {**manifest, "embedded": embedded}


def open_index(path: str | Path):
    """A retriever for a built index, from its path alone (offline: the embedding model is the
    packaged one or a local directory recorded in the manifest)."""
    path = Path(path)
    _recover_interrupted_swap(path)
    manifest_path = path / MANIFEST
    if not manifest_path.exists():
        raise FileNotFoundError(f"{path} is not a ragteam index (no {MANIFEST}); build one with "
                                "`ragteam index`")
    manifest = json.loads(manifest_path.read_text())
    kind = manifest["kind"]
    stores = []
    if kind in ("chroma", "hybrid"):
        from stores.chroma_store import ChromaStore
        embedder = load_embedder(EmbedderConfig(**manifest["embedder"]))
        stores.append(ChromaStore.persistent(str(path / "chroma"), embedder))
    if kind in ("bm25", "hybrid"):
        stores.append(BM25Store.load(path / "bm25", read_jsonl_corpus(path / "documents.jsonl")))
    return stores[0] if len(stores) == 1 else HybridStore(stores)


def _file_stats(path: str | Path) -> list:
    stat = Path(path).stat()
    return [stat.st_size, int(stat.st_mtime)]


def _staging_dir(out: Path, spec: dict) -> Path:
    """``<out>.partial``: reused when it was started with the same inputs, else started afresh."""
    staging = out.with_name(out.name + ".partial")
    fingerprint = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    build_file = staging / "build.json"
    if staging.exists():
        previous = json.loads(build_file.read_text()).get("fingerprint") if build_file.exists() else None
        if previous != fingerprint:
            shutil.rmtree(staging)
    staging.mkdir(parents=True, exist_ok=True)
    build_file.write_text(json.dumps({"fingerprint": fingerprint, "spec": spec}, indent=2))
    return staging


def _write_documents(documents: Sequence[Document], path: Path) -> None:
    temporary = path.with_suffix(".tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        for doc in documents:
            handle.write(json.dumps({"id": doc.id, "title": doc.title, "text": doc.text},
                                    ensure_ascii=False) + "\n")
    temporary.replace(path)


def _swap_in(staging: Path, target: Path) -> None:
    previous = target.with_name(target.name + ".previous")
    if previous.exists():
        shutil.rmtree(previous)
    if target.exists():
        target.rename(previous)
    staging.rename(target)
    (target / "build.json").unlink(missing_ok=True)
    shutil.rmtree(previous, ignore_errors=True)


def _recover_interrupted_swap(target: Path) -> None:
    """A crash between the two renames of ``_swap_in`` leaves only ``<out>.previous``: restore it."""
    previous = target.with_name(target.name + ".previous")
    if not (target / MANIFEST).exists() and (previous / MANIFEST).exists() and not target.exists():
        previous.rename(target)
