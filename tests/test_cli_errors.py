"""Bad input to the command line and the training scripts: exit 2 with one message naming the
path, record, flag or index at fault, never a traceback, and nothing echoed whole."""

import json
import os

import pytest

from ragteam.graphs.apps.cli import main
from ragteam.stores.jsonl import read_records, write_records


@pytest.fixture
def finished_eval(tmp_path):
    out = tmp_path / "ev"
    assert main(["eval", "--graph", "llm_only", "--policy", "scripted", "--limit", "2", "--out", str(out),
                 "--quiet"]) == 0
    return out / "llm_only"


def cli_cases(tmp_path, run):
    afile = tmp_path / "afile.txt"
    afile.write_text("x")
    folder = tmp_path / "folder"
    folder.mkdir()
    predictions = run / "predictions.jsonl"
    q = "Who is Ed Wood?"
    return {
        "index --corpus <dir>": ["index", "--corpus", str(folder), "--out", str(tmp_path / "ix")],
        "index --corpus <dir>.jsonl": ["index", "--corpus", str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "ix")],
        "eval --data <dir>": ["eval", "--data", str(folder), "--out", str(tmp_path / "e")],
        "eval --out <file>": ["eval", "--policy", "scripted", "--out", str(afile)],
        "eval --out afile/sub": ["eval", "--policy", "scripted", "--out", str(afile / "sub")],
        "run --trace-out <dir>": ["run", q, "--policy", "scripted", "--trace-out", str(folder)],
        "run --report <dir>": ["run", q, "--policy", "scripted", "--report", str(folder)],
        "draw --out <file>": ["draw", "--graph", "jade", "--out", str(afile)],
        "draw --out afile/sub": ["draw", "--graph", "jade", "--out", str(afile / "sub")],
        "compare --out <dir>": ["compare", str(run), str(run), "--out", str(folder)],
        "run --policy hf:/nowhere": ["run", q, "--policy", "hf:/nowhere"],
        "run --index /nowhere": ["run", q, "--policy", "scripted", "--index", "/nowhere"],
    }, predictions


def test_bad_paths_exit_2_with_a_message(tmp_path, finished_eval, capsys):
    (tmp_path / "d.jsonl").mkdir()
    cases, _ = cli_cases(tmp_path, finished_eval)
    for name, argv in cases.items():
        assert main(argv) == 2, name
        assert capsys.readouterr().err.startswith(f"ragteam {argv[0]}: "), name


@pytest.mark.parametrize("change", ["no f1", "f1 null", "f1 text", "f1 NaN", "f1 5.0", "a list", "no id",
                                    "duplicated"])
def test_compare_refuses_a_bad_record_naming_it(change, finished_eval, tmp_path, capsys):
    records = read_records(finished_eval / "predictions.jsonl")
    first = records[0]
    edits = {"no f1": lambda r: {k: v for k, v in r.items() if k != "f1"}, "f1 null": lambda r: {**r, "f1": None},
             "f1 text": lambda r: {**r, "f1": "0.5"}, "f1 NaN": lambda r: {**r, "f1": float("nan")},
             "f1 5.0": lambda r: {**r, "f1": 5.0}, "a list": lambda r: [1, 2],
             "no id": lambda r: {k: v for k, v in r.items() if k != "id"}}
    bad = tmp_path / "bad.jsonl"
    lines = records + [first] if change == "duplicated" else [edits[change](first), *records[1:]]
    bad.write_text("".join(json.dumps(r) + "\n" for r in lines))  # json.dumps writes NaN as NaN
    assert main(["compare", str(finished_eval), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragteam compare: ") and "bad.jsonl" in err


def test_compare_refuses_a_resample_count_that_would_exhaust_memory(finished_eval):
    with pytest.raises(SystemExit) as exit_:
        main(["compare", str(finished_eval), str(finished_eval), "--resamples", str(10 ** 12)])
    assert exit_.value.code == 2


@pytest.mark.parametrize("selection", [["--min-f1", "0"], ["--select", "hindsight-answers"]])
def test_sft_refuses_bad_records_naming_them(selection, finished_eval, tmp_path, capsys):
    from ragteam.trainers import sft_graph

    records = read_records(finished_eval / "predictions.jsonl")
    edits = {"no trace_path": lambda r: {k: v for k, v in r.items() if k != "trace_path"},
             "f1 text": lambda r: {**r, "f1": "1"}, "a list": lambda r: [1, 2]}
    if "hindsight-answers" in selection:  # its targets are the gold answers to the record's question
        edits["no question"] = lambda r: {k: v for k, v in r.items() if k != "question"}
    for name, edit in edits.items():
        folder = tmp_path / name.replace(" ", "_") / "llm_only"
        folder.mkdir(parents=True)
        write_records(folder / "predictions.jsonl", [edit({**records[0], "f1": 1.0})])
        assert sft_graph.main(["--traces", str(folder.parent), *selection,
                               "--out", str(tmp_path / "sft")]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith("sft_graph: ") and "predictions.jsonl" in err, (name, err[-1500:])


@pytest.mark.parametrize("select,message", [
    (["--select", "planner-by-type=qa.jsonl"], "planner-by-type chooses among explored workflows; give --explore"),
    (["--select", "planner-by-type"], "give planner-by-type=DATA"),
    (["--select", "hindsight-answers=x"], "hindsight-answers takes no argument"),
    (["--select", "hindsight-anwsers"], "no selector 'hindsight-anwsers'; known: "),
    (["--select", "hindsight-answers", "--select", "hindsight-answers-only"],
     "hindsight-answers and hindsight-answers-only both choose the calls of AG; choose one"),
    (["--selectors", "nowhere.py", "--select", "x"], "selectors reference 'nowhere.py': no file nowhere.py"),
])
def test_sft_refuses_a_bad_selection_in_one_line_before_anything_loads(select, message, finished_eval, tmp_path,
                                                                        capsys):
    from ragteam.trainers import sft_graph

    assert sft_graph.main(["--traces", str(finished_eval.parent), *select, "--out", str(tmp_path / "sft")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sft_graph: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "sft").exists()


@pytest.mark.parametrize("old,new", [
    (["--hindsight-answers"], "--select hindsight-answers"),
    (["--planner-targets-by-type", "q.jsonl"], "--select planner-by-type=DATA"),
    (["--decomposition-targets=c.jsonl"], "--select given-decompositions=FILE"),
    (["--backend", "torch"], "--optimizer"),
])
def test_sft_refuses_an_earlier_flag_naming_its_new_spelling(old, new, tmp_path, capsys):
    from ragteam.trainers import sft_graph

    with pytest.raises(SystemExit) as stopped:
        sft_graph.main(["--traces", str(tmp_path), *old])
    assert stopped.value.code == 2
    assert f"{old[0].split('=')[0]} is now " in capsys.readouterr().err.splitlines()[-1]
    assert new


def test_a_corrupt_chroma_index_is_one_line(tmp_path, corpus, capsys):
    from ragteam.stores.index import build_index

    build_index([corpus], "chroma", tmp_path / "ix")
    (tmp_path / "ix" / "chroma" / "chroma.sqlite3").write_bytes(os.urandom(2000))
    assert main(["search", "capital", "--index", str(tmp_path / "ix")]) == 2
    assert "chroma cannot read this index" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["run", ""], ["run", "   "], ["run", "q", "--temperature", "-1"],
                                  ["run", "q", "--max-rounds", "0"], ["run", "q", "--top-k", "-3"],
                                  ["run", "q", "--temperature", "nan"], ["eval", "--out", "x", "--concurrency", "0"]])
def test_bad_run_arguments_are_refused_naming_the_flag(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "error: argument" in capsys.readouterr().err


def test_a_huge_graph_value_is_not_echoed_whole(capsys):
    assert main(["run", "q", "--policy", "scripted", "--graph", "x" * 10_000_000]) == 2
    assert len(capsys.readouterr().err) < 3000



@pytest.mark.parametrize("script", ["ppo_graph", "sft_graph"])
def test_a_training_out_the_system_refuses_is_one_line(script, finished_eval, tmp_path, monkeypatch, capsys):
    """A read-only mount or a full disk under --out: the path and the system's reason, exit 2."""
    import errno
    import importlib
    import pathlib

    refused = tmp_path / "mount"
    real_mkdir = pathlib.Path.mkdir

    def mkdir(self, *args, **kwargs):
        if str(self).startswith(str(refused)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)
    argv = {"ppo_graph": ["--steps", "1", "--limit", "1", "--no-progress"],
            "sft_graph": ["--traces", str(finished_eval.parent), "--min-f1", "0"]}[script]
    code = importlib.import_module(f"ragteam.trainers.{script}").main(argv + ["--out", str(refused / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == f"{script}: {refused / 'run'}: {os.strerror(errno.EROFS)}"


def test_a_corpus_given_as_the_index_says_how_to_build_its_index(capsys):
    from pathlib import Path

    corpus = str(Path(__file__).resolve().parents[1] / "stores" / "data" / "hotpotqa_dev53_corpus.jsonl")
    assert main(["run", "Who is Ed Wood?", "--policy", "scripted", "--index", corpus]) == 2
    assert capsys.readouterr().err == (f"ragteam run: --index {corpus}: a file, not an index folder; if it is a "
                                       f"corpus, build its index first: ragteam index --corpus {corpus} --out "
                                       "INDEX_DIR, then --index INDEX_DIR\n")
