"""Lexical retrieval with ``bm25s`` (sparse-matrix BM25, English stop words, Snowball stemming)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import bm25s
import Stemmer

from ragteam.stores.documents import Document


class EmptyVocabularyError(ValueError):
    """The documents hold no word BM25 could index; the caller knows which corpus that was."""


class BM25Store:
    def __init__(self, documents: Sequence[Document], language: str = "english",
                 index: bm25s.BM25 | None = None):
        if not documents:
            raise ValueError("BM25Store needs at least one document")
        self.documents = list(documents)
        self.language = language
        self._stemmer = Stemmer.Stemmer(language)
        self._stopwords = "en" if language == "english" else None
        if index is None:
            tokens = bm25s.tokenize([d.as_passage() for d in self.documents],
                                    stopwords=self._stopwords, stemmer=self._stemmer,
                                    show_progress=False)
            if not tokens.vocab:  # bm25s would fail with "max() arg is an empty sequence"
                raise EmptyVocabularyError("no indexable words: every document is empty or "
                                           "only stop words")
            index = bm25s.BM25()
            index.index(tokens, show_progress=False)
        self._index = index

    def save(self, directory: str | Path) -> None:
        """The BM25 matrices only; the documents are saved by the index builder beside them."""
        self._index.save(str(directory))

    @classmethod
    def load(cls, directory: str | Path, documents: Sequence[Document],
             language: str = "english") -> "BM25Store":
        return cls(documents, language, index=bm25s.BM25.load(str(directory)))

    def search(self, query: str, k: int = 5) -> list[Document]:
        k = min(k, len(self.documents))
        tokens = bm25s.tokenize([query], stopwords=self._stopwords, stemmer=self._stemmer,
                                show_progress=False)
        if not tokens.vocab:  # nothing searchable in the query (e.g. only stop words)
            return []
        ids, scores = self._index.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [_with_score(self.documents[int(i)], float(s))
                for i, s in zip(ids[0], scores[0]) if float(s) > 0.0]


def _with_score(document: Document, score: float) -> Document:
    return Document(id=document.id, title=document.title, text=document.text, score=score)
