"""The bundled HotpotQA sample: a ready corpus and questions, so ragteam works with no downloads."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from ragteam.stores.bm25_store import BM25Store
from ragteam.stores.corpus import read_jsonl_corpus

DATA_DIR = Path(__file__).parent / "data"
DEMO_CORPUS = DATA_DIR / "hotpotqa_dev53_corpus.jsonl"
DEMO_QUESTIONS = DATA_DIR / "hotpotqa_dev53_questions.jsonl"


@lru_cache(maxsize=1)
def demo_retriever() -> BM25Store:
    """BM25 over the bundled 521 HotpotQA paragraphs: the default store."""
    return BM25Store(read_jsonl_corpus(DEMO_CORPUS))


def demo_questions() -> list[dict]:
    with open(DEMO_QUESTIONS, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
