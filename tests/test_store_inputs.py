"""Hostile inputs to the stores: index output paths, corpus files (a BOM, lone surrogates), datasets
(ids, metadata, huge numbers) and manifests.

Every failure must be a clear ValueError subclass naming the file (and line where there is one),
and nothing the user owns may be deleted.
"""

import json
import re

import pytest

from ragteam.stores.corpus import CorpusError, read_corpus, read_corpora, read_jsonl_corpus
from ragteam.stores.datasets import DatasetError, read_dataset
from ragteam.stores.documents import Document
from ragteam.stores.index import STAGING, IndexPathError, ManifestError, build_index, open_index
from ragteam.stores.jsonl import write_records
from ragteam.stores.owned import mark

DEEP = "[" * 100_000 + "]" * 100_000  # deeper than the json parser's recursion limit


def _jsonl(path, *records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


@pytest.fixture
def corpus(tmp_path):
    return _jsonl(tmp_path / "c.jsonl", {"id": "a", "text": "Paris is the capital of France"},
                  {"id": "b", "text": "Rome is the capital of Italy"})


def _cli(argv):
    from ragteam.graphs.apps.cli import main  # imported late: only these tests depend on the CLI
    return main(argv)


# -- 1. build_index never deletes what is not its own ----------------------------------------------
def test_build_refuses_to_replace_a_foreign_directory(corpus, tmp_path, capsys):
    out = tmp_path / "thesis"
    (out / "chapters").mkdir(parents=True)
    (out / "thesis.txt").write_text("four years of work")
    with pytest.raises(IndexPathError, match=re.escape(f"{out} exists and is not a ragteam index")):
        build_index([corpus], "bm25", out)
    assert _cli(["index", "--corpus", str(corpus), "--kind", "bm25", "--out", str(out)]) == 2
    assert "refusing to replace it" in capsys.readouterr().err
    assert (out / "thesis.txt").read_text() == "four years of work" and (out / "chapters").is_dir()
    assert not (tmp_path / "thesis.partial").exists()


def test_index_refuses_look_alikes_and_user_additions(corpus, tmp_path):
    look_alike = tmp_path / "site"
    look_alike.mkdir()
    (look_alike / "manifest.json").write_text('{"kind": "bm25", "n_documents": 3}')
    with pytest.raises(IndexPathError):
        build_index([corpus], "bm25", look_alike)
    assert (look_alike / "manifest.json").exists()

    staged = tmp_path / "ix.partial"
    staged.mkdir()
    (staged / "build.json").write_text("{}")
    with pytest.raises(IndexPathError):
        build_index([corpus], "bm25", tmp_path / "ix")
    assert (staged / "build.json").read_text() == "{}"

    index = tmp_path / "real"
    build_index([corpus], "bm25", index)
    (index / "my_notes.md").write_text("mine")
    with pytest.raises(IndexPathError):
        build_index([corpus], "bm25", index)
    assert (index / "my_notes.md").read_text() == "mine"


def test_build_refuses_a_file_a_foreign_manifest_and_a_foreign_partial(corpus, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me")
    with pytest.raises(IndexPathError):
        build_index([corpus], "bm25", a_file)
    assert a_file.read_text() == "keep me"

    webapp = tmp_path / "webapp"  # a web app's manifest.json is not a ragteam manifest
    webapp.mkdir()
    (webapp / "manifest.json").write_text('{"name": "app", "icons": []}')
    with pytest.raises(IndexPathError):
        build_index([corpus], "bm25", webapp)
    assert (webapp / "manifest.json").exists()

    partial = tmp_path / "idx.partial"
    partial.mkdir()
    (partial / "data.csv").write_text("x")
    with pytest.raises(IndexPathError, match=re.escape(f"{partial} exists and is not a ragteam build")):
        build_index([corpus], "bm25", tmp_path / "idx")
    assert (partial / "data.csv").exists()


def test_build_uses_an_empty_dir_and_replaces_its_own_index(corpus, tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    build_index([corpus], "bm25", out)
    assert open_index(out).search("capital of Italy", 1)[0].id == "b"
    build_index([corpus], "bm25", out)  # rebuilding over a ragteam index is fine
    staging = tmp_path / "empty.partial"
    staging.mkdir()
    mark(staging, STAGING)  # a build marks its staging first, then writes build.json
    (staging / "build.json").write_text('{"fingerp')  # killed while writing: restart, not crash
    build_index([corpus], "bm25", out)
    assert not staging.exists() and open_index(out).search("capital of France", 1)[0].id == "a"


# -- 12. corpus readers ---------------------------------------------------------------------------
def test_hotpot_context_with_non_string_title_or_sentence(tmp_path):
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps([{"context": [["A", ["ok."]]]}, {"context": [[7, ["x."]]]}]))
    with pytest.raises(CorpusError, match=r"hotpot.json: example 1: context paragraph 0 has a title"):
        read_corpus(path)
    path.write_text(json.dumps([{"context": [["A", ["ok.", None]]]}]))
    with pytest.raises(CorpusError, match=r"example 0: context paragraph 0 \('A'\) has a sentence"):
        read_corpus(path)


def test_dpr_tsv_reads_fields_over_128k(tmp_path):
    path = tmp_path / "psgs.tsv"
    long_text = "word " * 60_000  # 300 KB, over csv's default 128 KB field limit
    path.write_text(f"id\ttext\ttitle\n1\t{long_text}\tLong\n2\tshort\tS\n")
    assert [d.id for d in read_corpus(path)] == ["1", "2"]


def test_dpr_tsv_runaway_field_is_a_corpus_error_with_line(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_text('id\ttext\ttitle\n1\tok\tT\n2\t"unclosed ' + "x" * (9 * 1024 * 1024) + "\n")
    with pytest.raises(CorpusError, match=r"psgs.tsv:3: unreadable TSV row"):
        read_corpus(path)


def test_deeply_nested_json_is_a_corpus_error(tmp_path):
    hotpot = tmp_path / "deep.json"
    hotpot.write_text(DEEP)
    with pytest.raises(CorpusError, match=r"deep.json: invalid JSON \(nested too deeply\)"):
        read_corpus(hotpot)
    lines = _jsonl(tmp_path / "deep.jsonl", {"id": "a", "text": "ok"}, DEEP)
    with pytest.raises(CorpusError, match=r"deep.jsonl:2: invalid JSON \(nested too deeply\)"):
        read_corpus(lines)


@pytest.mark.parametrize("record,reason", [
    ({"id": None, "text": "t"}, "'id' must be a string or an integer, got null"),
    ({"id": [1], "text": "t"}, "'id' must be a string or an integer, got a list"),
    ({"id": {"k": 1}, "text": "t"}, "'id' must be a string or an integer, got an object"),
    ({"id": 1.5, "text": "t"}, "'id' must be a string or an integer, got a number"),
    ({"id": True, "text": "t"}, "'id' must be a string or an integer, got a boolean"),
    ({"id": "x", "text": None}, "'text' must be a string, got null"),
    ({"id": "x", "text": 42}, "'text' must be a string, got a number"),
    ({"id": "x", "text": ["a"]}, "'text' must be a string, got a list"),
    ({"id": "x", "text": {"a": 1}}, "'text' must be a string, got an object"),
    ({"id": "x", "text": "t", "title": ["T"]}, "'title' must be a string or an integer, got a list"),
    ({"id": "", "text": "t"}, "empty 'id'"),
    ({"id": "x", "text": "  "}, "empty 'text'"),
    ({"id": "x", "contents": ""}, "empty 'text'"),
])
def test_jsonl_fields_are_typed_not_stringified(tmp_path, record, reason):
    path = _jsonl(tmp_path / "c.jsonl", {"id": "ok", "text": "fine"}, record)
    with pytest.raises(CorpusError, match=re.escape(f"c.jsonl:2: {reason}")):
        read_jsonl_corpus(path)


def test_jsonl_int_ids_read_as_strings_and_null_title_as_none(tmp_path):
    path = _jsonl(tmp_path / "c.jsonl", {"id": 7, "title": None, "text": "t"}, {"id": "x", "title": 1984, "text": "u"})
    assert read_jsonl_corpus(path) == [Document("7", "", "t"), Document("x", "1984", "u")]


def test_corpus_without_indexable_words_names_the_corpus(tmp_path):
    path = _jsonl(tmp_path / "stop.jsonl", {"id": "a", "text": "the of and"}, {"id": "b", "text": "a an"})
    with pytest.raises(CorpusError, match=re.escape(f"{path}: no indexable words")):
        build_index([path], "bm25", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_duplicate_ids_name_the_second_occurrence(tmp_path):
    one = _jsonl(tmp_path / "one.jsonl", {"id": "a", "text": "x"}, "", {"id": "b", "text": "y"},
                 {"id": "a", "text": "z"})
    with pytest.raises(CorpusError, match=re.escape(f"{one}:4: duplicate document id 'a' (first at {one}:1)")):
        read_corpora([one])
    two = tmp_path / "two.tsv"
    two.write_text("id\ttext\ttitle\nc\tw\tT\nb\tv\tT\n")
    ok = _jsonl(tmp_path / "ok.jsonl", {"id": "a", "text": "x"}, {"id": "b", "text": "y"})
    with pytest.raises(CorpusError, match=re.escape(f"{two}:3: duplicate document id 'b' (first at {ok}:2)")):
        build_index([ok, two], "bm25", tmp_path / "out")


@pytest.mark.parametrize("name,content", [("e.jsonl", "\n  \n"), ("e.tsv", "id\ttext\ttitle\n"), ("e.json", "[]")])
def test_empty_corpus_names_the_file(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(CorpusError, match=re.escape(f"{path}: no documents")):
        read_corpus(path)
    ok = _jsonl(tmp_path / "ok.jsonl", {"id": "a", "text": "x"})
    with pytest.raises(CorpusError, match=re.escape(f"{path}: no documents")):
        build_index([ok, path], "bm25", tmp_path / "out")


@pytest.mark.parametrize("name,body,where", [
    ("c.jsonl", b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "caf\xe9"}\n', "c.jsonl:2"),
    ("c.tsv", b"id\ttext\ttitle\n1\tok\tT\n2\tcaf\xe9\tT\n", "c.tsv:3"),
    ("c.json", b'[{"context": [["A", ["ok."]]]},\n {"context": [["B", ["caf\xe9"]]]}]', "c.json:2"),
])
def test_bad_encoding_names_file_and_line(tmp_path, name, body, where):
    path = tmp_path / name
    path.write_bytes(body)
    with pytest.raises(CorpusError, match=re.escape(f"{where}: not UTF-8 text (byte 0xe9")):
        read_corpus(path)


# -- 13. datasets ---------------------------------------------------------------------------------
@pytest.mark.parametrize("answer", [[], [""], ["", "  "], "", "   "])
def test_empty_gold_answers_are_bad_records(tmp_path, answer):
    path = _jsonl(tmp_path / "d.jsonl", {"question": "ok?", "answer": "a"}, {"question": "q?", "answer": answer})
    with pytest.raises(DatasetError, match=r"d.jsonl:2: "):
        read_dataset(path)
    dataset = read_dataset(path, skip_bad=True)
    assert [e.golds for e in dataset.examples] == [("a",)] and len(dataset.skipped) == 1


def test_blank_gold_alternatives_are_dropped(tmp_path):
    path = _jsonl(tmp_path / "d.jsonl", {"question": "q?", "golden_answers": ["", "x"]})
    assert read_dataset(path).examples[0].golds == ("x",)


@pytest.mark.parametrize("name,content", [("d.jsonl", "\n"), ("d.json", "[]"), ("d.jsonl", '{"question": ""}\n')])
def test_empty_dataset_is_an_error_naming_the_file(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DatasetError, match=re.escape(f"{path}: no examples")):
        read_dataset(path, skip_bad=True)


def test_deeply_nested_dataset_line_is_a_bad_record(tmp_path):
    path = _jsonl(tmp_path / "d.jsonl", {"question": "ok?", "answer": "a"}, DEEP)
    with pytest.raises(DatasetError, match=r"d.jsonl:2: invalid JSON"):
        read_dataset(path)
    assert len(read_dataset(path, skip_bad=True).examples) == 1


# -- 15. manifests --------------------------------------------------------------------------------
def test_unknown_index_kind_is_an_error_naming_manifest_and_kind(corpus, tmp_path, capsys):
    out = tmp_path / "idx"
    build_index([corpus], "bm25", out)
    manifest_path = out / "manifest.json"
    manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "kind": "faiss"}))
    with pytest.raises(ManifestError, match=re.escape(f"{manifest_path}: unknown index kind 'faiss'")):
        open_index(out)
    assert _cli(["search", "--index", str(out), "capital"]) == 2
    assert "unknown index kind 'faiss'" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", DEEP])
def test_corrupt_manifest_names_its_path(corpus, tmp_path, content):
    out = tmp_path / "idx"
    build_index([corpus], "bm25", out)
    (out / "manifest.json").write_text(content)
    with pytest.raises(ManifestError, match=re.escape(f"{out / 'manifest.json'}: corrupt index manifest")):
        open_index(out)


def test_a_bom_before_a_tsv_header_is_not_a_document(tmp_path):
    from ragteam.stores.corpus import read_corpus

    path = tmp_path / "psgs.tsv"
    path.write_text("\ufeffid\ttext\ttitle\n1\tParis is in France.\tParis\n", encoding="utf-8")
    assert [d.id for d in read_corpus(path)] == ["1"]


@pytest.mark.parametrize("value", [None, {"a": 1}, 1.5, "", True])
def test_dataset_ids_must_be_strings_or_integers(value, tmp_path):
    path = tmp_path / "qa.jsonl"
    write_records(path, [{"id": value, "question": "q?", "answer": "a"}])
    with pytest.raises(DatasetError, match=r"qa.jsonl:1: 'id' must be"):
        read_dataset(path)


def test_dataset_metadata_must_be_an_object_and_duplicates_name_both_lines(tmp_path):
    path = tmp_path / "qa.jsonl"
    write_records(path, [{"id": "1", "question": "q?", "answer": "a", "metadata": "oops"}])
    with pytest.raises(DatasetError, match="'metadata' must be an object"):
        read_dataset(path)
    write_records(path, [{"id": "1", "question": "q?", "answer": "a"}, {"id": "2", "question": "q?", "answer": "a"},
                         {"id": "1", "question": "r?", "answer": "b"}])
    with pytest.raises(DatasetError, match=r"qa.jsonl:3: duplicate example id '1' \(first at .*qa.jsonl:1\)"):
        read_dataset(path)


def test_a_huge_number_is_a_bad_line_that_skip_bad_skips(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"question": "q?", "answer": "a", "n": ' + "9" * 5000 + "}\n"
                    '{"question": "r?", "answer": "b"}\n')
    with pytest.raises(DatasetError, match=r"qa.jsonl:1: invalid JSON"):
        read_dataset(path)
    assert [e.question for e in read_dataset(path, skip_bad=True).examples] == ["r?"]


def test_a_lone_surrogate_in_a_corpus_is_cleaned_where_it_is_read(tmp_path):
    from ragteam.stores.index import build_index, open_index

    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "1", "title": "T\\ud800", "text": "Paris \\udfff is in France."}\n')
    build_index([path], "bm25", tmp_path / "ix")
    [doc] = open_index(tmp_path / "ix").search("Paris", 1)
    assert doc.title == "T\ufffd" and not (tmp_path / "ix.partial").exists()

