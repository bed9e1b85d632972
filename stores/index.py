"""Building and opening retrieval indexes on disk.

An index directory holds ``manifest.json`` (what it is and how to reopen it), ``documents.jsonl``,
and ``bm25/`` and/or ``chroma/``. Builds are atomic and resumable: everything is written into a
sibling ``<out>.partial`` directory whose ``build.json`` fingerprints the inputs; the manifest is
written last, and only then is the finished directory swapped in for the old one. A build that
fails or is killed leaves the previous index untouched, and rerunning the same command resumes
the partial build (documents already embedded are not embedded again).

A build only ever deletes what is its own: an existing ``out`` must be a ragteam index (marked as
one, ``stores.owned``) holding nothing but what a build writes, or an empty directory, and
``<out>.partial`` / ``<out>.previous`` must be ragteam's staging or old index; anything else — a
folder with a look-alike manifest, a staging folder with a stray ``build.json``, an index a user
added files to — is refused with ``IndexPathError``.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

from ragteam.stores.atomic import replace_file
from ragteam.stores.bm25_store import BM25Store, EmptyVocabularyError
from ragteam.stores.corpus import CorpusError, corpus_file, read_corpora, read_jsonl_corpus
from ragteam.stores.documents import Document
from ragteam.stores.embeddings import EmbedderConfig, load_embedder
from ragteam.stores.hybrid_store import HybridStore
from ragteam.stores.owned import MARKER, Kind, mark, owner
from ragteam.stores.retriever import Retriever

KINDS = ("bm25", "chroma", "hybrid")
MANIFEST = "manifest.json"
BUILD_FILE = "build.json"
INDEX = Kind("index", (), ())
STAGING = Kind("index build", (), ())
_LEGACY_MANIFEST_KEYS = ("kind", "corpus", "n_documents", "built_at")


class IndexPathError(ValueError):
    """The output path holds something that is not ragteam's to replace; nothing was deleted."""


class ManifestError(ValueError):
    """An index manifest that cannot be read or names a kind this version does not know."""


def load_corpora(paths: Sequence[str | Path], chunk_words: int | None = None,
                 chunk_overlap: int = 20) -> list[Document]:
    return read_corpora(paths, chunk_words, chunk_overlap)


def build_index(corpus: Sequence[str | Path], kind: str, out: str | Path,
                embedder: EmbedderConfig = EmbedderConfig(), chunk_words: int | None = None,
                chunk_overlap: int = 20, progress: bool = False,
                on_batch: Callable[[int], None] | None = None) -> dict:
    """Build (or resume building) an index and swap it in at ``out``. Returns its manifest,
    with ``embedded`` = how many documents this call embedded."""
    if kind not in KINDS:
        raise ValueError(f"unknown index kind {kind!r}; choose one of {', '.join(KINDS)}")
    out = Path(out)
    _refuse_foreign(out)  # before any work, so a refused build costs nothing
    started = time.perf_counter()
    corpus = [corpus_file(p) for p in corpus]  # a PhantomWiki folder: fingerprint its articles.json
    documents = load_corpora(corpus, chunk_words, chunk_overlap)
    spec = {"kind": kind, "corpus": [str(Path(p).resolve()) for p in corpus],
            "corpus_stats": [_file_stats(p) for p in corpus], "chunk_words": chunk_words,
            "chunk_overlap": chunk_overlap, "embedder": asdict(embedder) if kind != "bm25" else None}
    staging = _staging_dir(out, spec)
    _write_documents(documents, staging / "documents.jsonl")
    embedded = 0
    if kind in ("bm25", "hybrid"):
        _bm25(documents, corpus).save(staging / "bm25")
    if kind in ("chroma", "hybrid"):
        from ragteam.stores.chroma_store import ChromaStore, release_clients
        store = ChromaStore.persistent(str(staging / "chroma"), load_embedder(embedder))
        embedded = store.add(documents, progress=progress, on_batch=on_batch)
        release_clients()  # the directory is about to move; drop chroma's cached handle on it
    manifest = {**spec, "n_documents": len(documents), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "build_seconds": round(time.perf_counter() - started, 3)}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
    _swap_in(staging, out)
    return {**manifest, "embedded": embedded}


def open_index(path: str | Path) -> Retriever:
    """A retriever for a built index, from its path alone (offline: the embedding model is the
    packaged one or a local directory recorded in the manifest)."""
    path = Path(path)
    _recover_interrupted_swap(path)
    manifest_path = path / MANIFEST
    if not manifest_path.exists():
        raise FileNotFoundError(f"{path} is not a ragteam index (no {MANIFEST}); build one with "
                                "`ragteam index`")
    manifest = read_manifest(manifest_path)
    kind = manifest["kind"]
    stores = []
    if kind in ("chroma", "hybrid"):
        from ragteam.stores.chroma_store import ChromaStore
        embedder = load_embedder(_embedder_config(manifest, manifest_path))
        stores.append(ChromaStore.persistent(str(path / "chroma"), embedder))
    if kind in ("bm25", "hybrid"):
        stores.append(BM25Store.load(path / "bm25", read_jsonl_corpus(path / "documents.jsonl")))
    return stores[0] if len(stores) == 1 else HybridStore(stores)


def read_manifest(manifest_path: Path) -> dict:
    """The manifest, checked: an unknown kind would otherwise open as a store with no hits."""
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as error:  # bad JSON and bad bytes are both ValueErrors
        raise ManifestError(f"{manifest_path}: corrupt index manifest ({error}); rebuild the "
                            "index with `ragteam index`") from None
    if not isinstance(manifest, dict):
        raise ManifestError(f"{manifest_path}: corrupt index manifest (not a JSON object)")
    if manifest.get("kind") not in KINDS:
        raise ManifestError(f"{manifest_path}: unknown index kind {manifest.get('kind')!r} "
                            f"(this ragteam opens {', '.join(KINDS)})")
    return manifest


def _embedder_config(manifest: dict, manifest_path: Path) -> EmbedderConfig:
    try:
        return EmbedderConfig(**manifest["embedder"])
    except (KeyError, TypeError) as error:
        raise ManifestError(f"{manifest_path}: corrupt index manifest (bad 'embedder': "
                            f"{error})") from None


def _bm25(documents: Sequence[Document], corpus: Sequence[str | Path]) -> BM25Store:
    try:
        return BM25Store(documents)
    except EmptyVocabularyError as error:
        raise CorpusError(f"{', '.join(map(str, corpus))}: {error}") from None


def _refuse_foreign(out: Path) -> None:
    """Refuse a build whose ``out``, ``.partial`` or ``.previous`` holds anything but ragteam's own
    (an index, a staging dir) or an empty directory: the build would delete it."""
    index = f"a ragteam index (no valid {MANIFEST})"
    checks = ((out, _is_index, index),
              (_sibling(out, ".partial"), _is_staging, f"a ragteam build in progress (no {BUILD_FILE})"),
              (_sibling(out, ".previous"), _is_index, index))
    for path, is_ours, ours in checks:
        if path.is_symlink():  # ragteam never makes one: even a link to an empty folder is a user's
            raise IndexPathError(f"{path} is a symlink; ragteam builds an index only into folders it "
                                 "created: choose another output directory or remove the link yourself")
        if _occupied(path) and not (_is_empty_dir(path) or is_ours(path)):
            raise IndexPathError(f"{path} exists and is not {ours}; refusing to replace it: "
                                 "choose another output directory or remove it yourself")


def _sibling(out: Path, suffix: str) -> Path:
    return out.with_name(out.name + suffix)


def _occupied(path: Path) -> bool:
    return path.exists() or path.is_symlink()  # a dangling symlink still blocks a rename


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


# what a build writes (a kill just after the swap can leave build.json in the index)
INDEX_ENTRIES = {MARKER, MANIFEST, "documents.jsonl", "bm25", "chroma", BUILD_FILE}
STAGING_ENTRIES = INDEX_ENTRIES | {"documents.jsonl.tmp"}  # .tmp: a partial file of an older build
PARTIAL = re.compile(r"\.documents\.jsonl\.\w+\.partial")  # replace_file's, cut short by a kill


def _holds_only(path: Path, names: set[str]) -> bool:
    return all(entry.name in names or PARTIAL.fullmatch(entry.name) for entry in path.iterdir())


def _is_index(path: Path) -> bool:
    """A folder a build swapped in: marked as an index (or, from before the marker, a complete
    manifest beside its documents), holding nothing a user added."""
    if not path.is_dir() or path.is_symlink() or not _holds_only(path, INDEX_ENTRIES):
        return False
    if owner(path) == INDEX.name:
        return True
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return (isinstance(manifest, dict) and set(_LEGACY_MANIFEST_KEYS) <= manifest.keys()
            and (path / "documents.jsonl").is_file())


def _is_staging(path: Path) -> bool:
    """A build's staging folder: marked as one (or, from before the marker, a ``build.json``
    with its fingerprint), holding nothing a user added."""
    if not path.is_dir() or path.is_symlink() or not _holds_only(path, STAGING_ENTRIES):
        return False
    # marked as an index: a kill came between marking it and swapping it in
    return owner(path) in (STAGING.name, INDEX.name) or _staged_fingerprint(path / BUILD_FILE) is not None


def _remove(path: Path, quiet: bool = False) -> None:
    """Delete a directory of ours if there; for a symlink only the link, never what it points to."""
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=quiet)


def _file_stats(path: str | Path) -> list:
    stat = Path(path).stat()
    return [stat.st_size, int(stat.st_mtime)]


def _staging_dir(out: Path, spec: dict) -> Path:
    """``<out>.partial``: reused when it was started with the same inputs, else started afresh."""
    staging = _sibling(out, ".partial")
    fingerprint = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    build_file = staging / BUILD_FILE
    if _staged_fingerprint(build_file) != fingerprint:
        _remove(staging)
    staging.mkdir(parents=True, exist_ok=True)
    mark(staging, STAGING)
    build_file.write_text(json.dumps({"fingerprint": fingerprint, "spec": spec}, indent=2))
    return staging


def _staged_fingerprint(build_file: Path) -> str | None:
    """None when absent or unreadable (a kill while it was written): the staging restarts."""
    try:
        fingerprint = json.loads(build_file.read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return fingerprint if isinstance(fingerprint, str) and fingerprint else None


def _write_documents(documents: Sequence[Document], path: Path) -> None:
    replace_file(path, (json.dumps({"id": doc.id, "title": doc.title, "text": doc.text}, ensure_ascii=False) + "\n"
                        for doc in documents))


def _swap_in(staging: Path, target: Path) -> None:
    previous = _sibling(target, ".previous")
    _remove(previous)
    if _occupied(target):
        target.rename(previous)
    mark(staging, INDEX)
    staging.rename(target)
    (target / BUILD_FILE).unlink(missing_ok=True)
    _remove(previous, quiet=True)


def _recover_interrupted_swap(target: Path) -> None:
    """A crash between the two renames of ``_swap_in`` leaves only ``<out>.previous``: restore it."""
    previous = target.with_name(target.name + ".previous")
    if not (target / MANIFEST).exists() and (previous / MANIFEST).exists() and not target.exists():
        previous.rename(target)


def open_retriever(index: str | None) -> Retriever:
    """A built index directory, or the bundled demo store when none is given."""
    from ragteam.stores.demo import demo_retriever

    return open_index(index) if index else demo_retriever()
