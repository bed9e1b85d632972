"""The retrieval protocol the RA node calls. Any object with ``search`` is a retriever."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ragteam.stores.documents import Document


@runtime_checkable
class Retriever(Protocol):
    def search(self, query: str, k: int = 5) -> list[Document]: ...


def search_unseen(retriever: Retriever, query: str, k: int, seen: set[str]) -> list[Document]:
    """The top ``k`` documents not in ``seen`` (a run's already-read ids), which it then extends.
    Over-fetches by ``len(seen)`` so filtering never leaves fewer than ``k`` when more exist."""
    found = [doc for doc in retriever.search(query, k + len(seen)) if doc.id not in seen][:k]
    seen.update(doc.id for doc in found)
    return found
