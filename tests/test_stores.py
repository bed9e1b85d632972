import re

import pytest

from ragteam.stores.bm25_store import BM25Store
from ragteam.stores.corpus import CorpusError, hotpot_paragraphs, read_jsonl_corpus
from ragteam.stores.demo import demo_questions, demo_retriever
from ragteam.stores.documents import Document


def test_jsonl_corpus_reads_records(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": 1, "title": "A", "text": "alpha"}\n\n{"id": "b", "text": "beta"}\n')
    assert read_jsonl_corpus(path) == [Document("1", "A", "alpha"), Document("b", "", "beta")]


@pytest.mark.parametrize("line,reason", [
    ("{not json", "invalid JSON"), ('["a"]', "expected an object"), ('{"id": 1}', "missing field(s) text"),
])
def test_bad_corpus_line_names_file_and_line(tmp_path, line, reason):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": 1, "text": "ok"}\n' + line + "\n")
    with pytest.raises(CorpusError, match=re.escape(f"c.jsonl:2: {reason}")):
        read_jsonl_corpus(path)


def test_hotpot_contexts_pool_by_title():
    examples = [{"context": [["A", ["x. ", "y."]], ["B", ["z."]]]}, {"context": [["A", ["x. ", "y."]]]}]
    docs = hotpot_paragraphs(examples)
    assert [(d.title, d.text) for d in docs] == [("A", "x. y."), ("B", "z.")]


def test_bm25_ranks_the_matching_document_first():
    store = BM25Store([Document("1", "Paris", "capital of France"), Document("2", "Rome", "capital of Italy"),
                       Document("3", "Oslo", "capital of Norway")])
    hits = store.search("Which city is the capital of Italy?", k=2)
    assert hits[0].id == "2" and hits[0].score > 0
    assert store.search("the of and", k=2) == []


def test_demo_retriever_finds_gold_paragraphs():
    retriever = demo_retriever()
    questions = demo_questions()
    assert len(retriever.documents) == 521 and len(questions) == 53
    hits = sum(bool({d.title for d in retriever.search(q["question"], 5)} & set(q["supporting_titles"]))
               for q in questions)
    assert hits >= 45  # at least one gold paragraph in the top 5 for most questions
