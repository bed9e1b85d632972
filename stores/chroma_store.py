"""Dense retrieval on chromadb: an embedded ``PersistentClient`` by default, or a running
``chroma run`` server through ``HttpClient``. Embeddings always come from our explicit
sentence-transformers function (``RagteamEmbeddingFunction`` below, over ``stores.embeddings``)."""

from __future__ import annotations

from typing import Any, Sequence

import chromadb
import chromadb.errors
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.config import Settings as ChromaSettings
from chromadb.utils.embedding_functions import register_embedding_function

from ragteam.stores.documents import Document
from ragteam.stores.embeddings import EmbedderConfig, SentenceEmbedder, load_embedder

COLLECTION = "ragteam"
@register_embedding_function
class RagteamEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma's view of a ``SentenceEmbedder``. Giving chroma this explicit function keeps it
    from instantiating its own default one, which downloads a model and fails offline."""

    def __init__(self, embedder: SentenceEmbedder | None = None, **config: Any):
        self.embedder = embedder or load_embedder(EmbedderConfig(**config))

    def __call__(self, input: Documents) -> Embeddings:
        return self.embedder.embed_passages(list(input))

    def embed_query(self, input: Documents) -> Embeddings:
        return self.embedder.embed_queries(list(input))

    @staticmethod
    def name() -> str:
        return "ragteam-sentence-transformers"

    def default_space(self):
        return "cosine"

    def get_config(self) -> dict[str, Any]:
        config = self.embedder.config
        return {"model": config.model, "query_prefix": config.query_prefix,
                "passage_prefix": config.passage_prefix, "batch_size": config.batch_size}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> "RagteamEmbeddingFunction":
        return RagteamEmbeddingFunction(**config)


def _no_telemetry() -> ChromaSettings:
    """Fresh settings per client: chroma's client constructors write into the object they are
    given (an HttpClient sets its server address there), so a shared one would send every later
    embedded client to that server."""
    return ChromaSettings(anonymized_telemetry=False)


class ChromaIndexError(ValueError):
    """A chroma index on disk that chroma cannot open or query (corrupt, or from another version)."""


def _chroma_call(where: str, what, *args, **kwargs):
    """Run a chroma call; its errors become one line naming the index (a rebuild fixes them)."""
    try:
        return what(*args, **kwargs)
    except chromadb.errors.ChromaError as error:
        raise ChromaIndexError(f"{where}: chroma cannot read this index ({error}); rebuild it with "
                               "`ragteam index`") from None


class ChromaStore:
    def __init__(self, client, embedder: SentenceEmbedder, collection: str = COLLECTION):
        self.client = client
        self.embedder = embedder
        self.function = RagteamEmbeddingFunction(embedder)
        self.collection = client.get_or_create_collection(
            collection, embedding_function=self.function, configuration={"hnsw": {"space": "cosine"}})

    @classmethod
    def persistent(cls, path: str, embedder: SentenceEmbedder | None = None,
                   collection: str = COLLECTION) -> "ChromaStore":
        client = _chroma_call(path, chromadb.PersistentClient, path=str(path), settings=_no_telemetry())
        store = _chroma_call(path, cls, client, embedder or load_embedder(), collection)
        store.path = str(path)
        return store

    @classmethod
    def remote(cls, host: str, port: int, embedder: SentenceEmbedder | None = None,
               collection: str = COLLECTION) -> "ChromaStore":
        client = chromadb.HttpClient(host=host, port=port, settings=_no_telemetry())
        return cls(client, embedder or load_embedder(), collection)

    def count(self) -> int:
        return self.collection.count()

    def add(self, documents: Sequence[Document], batch_size: int = 256, progress: bool = False,
            skip_existing: bool = True, on_batch=None) -> int:
        """Embed and add documents in batches; with ``skip_existing`` (resume), ids already in the
        collection are not embedded again. Returns how many documents were embedded."""
        from tqdm.auto import tqdm

        added = 0
        bar = tqdm(total=len(documents), desc="embedding", unit="doc", disable=not progress)
        for start in range(0, len(documents), batch_size):
            batch = list(documents[start:start + batch_size])
            if skip_existing:
                present = set(self.collection.get(ids=[d.id for d in batch], include=[])["ids"])
                batch = [d for d in batch if d.id not in present]
            if batch:
                vectors = self.embedder.embed_passages([d.as_passage() for d in batch])
                self.collection.add(ids=[d.id for d in batch], embeddings=vectors,
                                    documents=[d.text for d in batch],
                                    metadatas=[{"title": d.title} for d in batch])
                added += len(batch)
            bar.update(min(batch_size, len(documents) - start))
            if on_batch:
                on_batch(added)
        bar.close()
        return added

    def search(self, query: str, k: int = 5) -> list[Document]:
        if not query.strip() or k <= 0:
            return []
        [vector] = self.embedder.embed_queries([query])
        found = _chroma_call(getattr(self, "path", "chroma"), self.collection.query,
                             query_embeddings=[vector], n_results=min(k, max(self.count(), 1)),
                             include=["documents", "metadatas", "distances"])
        return [Document(id=doc_id, title=(meta or {}).get("title", ""), text=text, score=1.0 - distance)
                for doc_id, text, meta, distance in zip(found["ids"][0], found["documents"][0],
                                                         found["metadatas"][0], found["distances"][0])]


def release_clients() -> None:
    """Forget chroma's per-path client cache (needed before a persisted directory is moved)."""
    from chromadb.api.shared_system_client import SharedSystemClient
    SharedSystemClient.clear_system_cache()
