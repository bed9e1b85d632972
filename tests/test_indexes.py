"""Built indexes: formats in, atomic and resumable builds, reopening offline, chroma server."""

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragteam.graphs.apps.cli import main
from ragteam.stores.corpus import CorpusError, chunk_documents, read_corpus
from ragteam.stores.demo import DEMO_CORPUS
from ragteam.stores.documents import Document
from ragteam.stores.hybrid_store import HybridStore, reciprocal_rank_fusion
from ragteam.stores.index import build_index, open_index
from ragteam.stores.retriever import search_unseen

QUERIES = ["Who portrayed Corliss Archer?", "Scott Derrickson director", "science fantasy series"]


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """The first 60 demo paragraphs: enough to rank, quick to embed."""
    path = tmp_path_factory.mktemp("corpus") / "small.jsonl"
    path.write_text("".join(DEMO_CORPUS.read_text().splitlines(keepends=True)[:60]))
    return path


@pytest.fixture(scope="module")
def hybrid_index(small_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("index") / "hybrid"
    build_index([small_corpus], "hybrid", out)
    return out


def test_dpr_tsv_with_header(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_text('id\ttext\ttitle\n1\t"Aaron is a prophet"\tAaron\n2\tSecond text\tB\n')
    assert read_corpus(path) == [Document("1", "Aaron", "Aaron is a prophet"), Document("2", "B", "Second text")]


def test_dpr_tsv_bad_row_names_file_and_line(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_text("id\ttext\ttitle\n1\tok\tT\n2\tmissing title\n")
    with pytest.raises(CorpusError, match=r"psgs.tsv:3: expected 3 tab-separated fields"):
        read_corpus(path)  # the .tsv suffix picks the DPR reader


def test_hotpot_json_pools_context_paragraphs(tmp_path):
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps([{"context": [["A", ["one. ", "two."]], ["B", ["x."]]]},
                                {"context": [["B", ["x."]], ["C", ["y."]]]}]))
    assert [d.title for d in read_corpus(path)] == ["A", "B", "C"]
    path.write_text(json.dumps([{"context": "nope"}]))
    with pytest.raises(CorpusError, match="example 0"):
        read_corpus(path)


def test_unknown_format_and_duplicate_ids_are_refused(tmp_path):
    with pytest.raises(CorpusError, match="unknown corpus format"):
        read_corpus(tmp_path / "corpus.parquet")
    path = tmp_path / "dup.jsonl"
    path.write_text('{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n')
    with pytest.raises(CorpusError, match="duplicate document id '1'"):
        build_index([path], "bm25", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_chunking_overlaps_windows():
    doc = Document("d", "T", " ".join(f"w{i}" for i in range(10)))
    chunks = chunk_documents([doc], max_words=4, overlap=1)
    assert [c.text for c in chunks] == ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]
    assert [c.id for c in chunks] == ["d#0", "d#1", "d#2"]
    assert chunk_documents([Document("s", "", "short")], 4, 1)[0].id == "s"


def test_reciprocal_rank_fusion_on_a_constructed_example():
    a, b, c, d = (Document(x, x, x) for x in "abcd")
    fused = reciprocal_rank_fusion([[a, b, c], [c, a, d]], k=4, k_rrf=60)
    # a: 1/61 + 1/62; c: 1/63 + 1/61; b: 1/62; d: 1/63
    assert [doc.id for doc in fused] == ["a", "c", "b", "d"]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 62)


def test_hybrid_store_fuses_its_retrievers():
    class Fixed:
        def __init__(self, ids):
            self.docs = [Document(i, i, i) for i in ids]

        def search(self, query, k=5):
            return self.docs[:k]

    store = HybridStore([Fixed("xyz"), Fixed("zyw")], depth=3)
    assert [d.id for d in store.search("q", 2)] == ["z", "y"]


def test_search_unseen_filters_what_a_run_already_read():
    class Ranked:
        def search(self, query, k=5):
            return [Document(str(i), "", "") for i in range(k)]

    seen: set[str] = set()
    assert [d.id for d in search_unseen(Ranked(), "q", 2, seen)] == ["0", "1"]
    assert [d.id for d in search_unseen(Ranked(), "q", 2, seen)] == ["2", "3"]
    assert seen == {"0", "1", "2", "3"}


def test_every_kind_builds_and_answers(small_corpus, hybrid_index, tmp_path):
    build_index([small_corpus], "bm25", tmp_path / "bm25")
    for path in (tmp_path / "bm25", hybrid_index):
        hits = open_index(path).search("Corliss Archer", 3)
        assert len(hits) == 3 and "Corliss" in " ".join(d.title + d.text for d in hits)
    manifest = json.loads((hybrid_index / "manifest.json").read_text())
    assert manifest["kind"] == "hybrid" and manifest["n_documents"] == 60


@pytest.mark.slow  # a chain of scripts (or a dense index built twice): tens of seconds
def test_interrupted_build_keeps_the_old_index_and_resumes(small_corpus, tmp_path):
    out = tmp_path / "dense"
    first = build_index([small_corpus], "chroma", out)
    assert first["embedded"] == 60
    before = [[d.id for d in open_index(out).search(q, 3)] for q in QUERIES]

    bigger = tmp_path / "bigger.jsonl"
    bigger.write_text(small_corpus.read_text() + "".join(
        DEMO_CORPUS.read_text().splitlines(keepends=True)[60:300]))

    def crash_after_first_batch(embedded):
        raise KeyboardInterrupt("simulated kill mid-build")

    with pytest.raises(KeyboardInterrupt):
        build_index([bigger], "chroma", out, on_batch=crash_after_first_batch)
    assert (tmp_path / "dense.partial").exists()
    assert [[d.id for d in open_index(out).search(q, 3)] for q in QUERIES] == before  # old index intact
    assert json.loads((out / "manifest.json").read_text())["n_documents"] == 60

    resumed = build_index([bigger], "chroma", out)
    assert resumed["n_documents"] == 300
    assert resumed["embedded"] == 300 - 256  # the first batch (256 documents) was not embedded again
    assert not (tmp_path / "dense.partial").exists()
    assert open_index(out).search("Corliss Archer", 1)


def test_reopened_offline_in_another_process(hybrid_index):
    here = [[d.id for d in open_index(hybrid_index).search(q, 5)] for q in QUERIES]
    code = ("import json, sys; from ragteam.stores.index import open_index; r = open_index(sys.argv[1]); "
            f"print(json.dumps([[d.id for d in r.search(q, 5)] for q in {QUERIES!r}]))")
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code, str(hybrid_index)], capture_output=True,
                          text=True, timeout=300, env=env, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == here


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_chroma_server_serves_what_the_embedded_store_does(hybrid_index, tmp_path):
    import chromadb

    from ragteam.stores.chroma_store import ChromaStore

    served = tmp_path / "served"
    shutil.copytree(hybrid_index / "chroma", served)  # the server gets its own copy of the files
    chroma = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
    port = _free_port()
    server = subprocess.Popen([chroma, "run", "--path", str(served), "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
                break
            except Exception:
                if time.time() > deadline or server.poll() is not None:
                    raise AssertionError("chroma server did not come up")
                time.sleep(0.3)
        remote = ChromaStore.remote("127.0.0.1", port)
        local = ChromaStore.persistent(str(hybrid_index / "chroma"))
        for query in QUERIES:
            assert [d.id for d in remote.search(query, 5)] == [d.id for d in local.search(query, 5)]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_cli_index_search_and_run_with_an_index(small_corpus, tmp_path, capsys):
    out = tmp_path / "cli-index"
    assert main(["index", "--corpus", str(small_corpus), "--kind", "bm25", "--out", str(out)]) == 0
    assert "bm25 index of 60 documents" in capsys.readouterr().out
    assert main(["search", "--index", str(out), "-k", "2", "Corliss Archer"]) == 0
    assert capsys.readouterr().out.count("score") == 2
    assert main(["run", "--policy", "scripted", "--index", str(out), "Who played Corliss Archer?"]) == 0
    assert "Round 1 [0] RA,AG" in capsys.readouterr().out
