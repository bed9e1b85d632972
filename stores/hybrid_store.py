"""Hybrid retrieval: reciprocal-rank fusion of several retrievers (dense + BM25 by default).

RRF score of a document = Σ over retrievers of 1 / (k_rrf + rank), rank starting at 1; k_rrf = 60
as in Cormack et al. (2009). Fusion needs no score calibration between lexical and dense scores.
"""

from __future__ import annotations

from typing import Sequence

from ragteam.stores.documents import Document
from ragteam.stores.retriever import Retriever


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Document]], k: int,
                           k_rrf: int = 60) -> list[Document]:
    scores: dict[str, float] = {}
    first_seen: dict[str, Document] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, 1):
            scores[doc.id] = scores.get(doc.id, 0.0) + 1.0 / (k_rrf + rank)
            first_seen.setdefault(doc.id, doc)
    order = sorted(scores, key=lambda doc_id: -scores[doc_id])  # stable: ties keep first-seen order
    return [Document(id=i, title=first_seen[i].title, text=first_seen[i].text, score=scores[i])
            for i in order[:k]]


class HybridStore:
    def __init__(self, retrievers: Sequence[Retriever], depth: int = 20, k_rrf: int = 60):
        self.retrievers = list(retrievers)
        self.depth = depth  # how deep each ranking is read before fusing
        self.k_rrf = k_rrf

    def search(self, query: str, k: int = 5) -> list[Document]:
        depth = max(self.depth, k)
        rankings = [retriever.search(query, depth) for retriever in self.retrievers]
        return reciprocal_rank_fusion(rankings, k, self.k_rrf)
