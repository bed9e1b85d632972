"""The retrieval protocol the RA node calls. Any object with ``search`` is a retriever."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from stores.documents import Document


@runtime_checkable
class Retriever(Protocol):
    def search(self, query: str, k: int = 5) -> list[Document]: ...
