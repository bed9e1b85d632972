"""Runs a user can trust: every repro of the trust issue, now refused cleanly, kept, or clean.

Items: (1) records with any Unicode line separator, (2) a missing final newline or a torn trace,
(3) output folders that are not ragteam's, (4) resume restores its run, (5) the recipe checked
whole, (6) exit 2 instead of tracebacks, (7) no silent accepts, (8) Unicode where input enters,
(9) progress off a terminal. Item 10 (quiet shutdowns) lives with the vLLM and trainer tests.
"""

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphs.apps.cli import main
from graphs.eval.evaluate import evaluate_graph, read_finished, read_predictions
from graphs.methods import build_graph
from nodes.context import ContextSpec, RunContext, Settings
from nodes.policies.scripted import ScriptedPolicy
from nodes.team import Team
from stores.datasets import DatasetError, QAExample, read_dataset
from stores.demo import demo_retriever
from stores.jsonl import append_records, dumps_line, read_lines, read_records, write_records
from stores.owned import ForeignPathError, check_owned, EVAL

ROOT = Path(__file__).resolve().parents[1]
SIMPLE = {"planner": "<workflow>RA,AG</workflow>", "AG": "<answer>yes</answer>"}
# every character str.splitlines() breaks on, besides "\n"
SEPARATORS = ["\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def run_eval(out, items, policy=None):
    ctx = RunContext(Team(policy or ScriptedPolicy(SIMPLE)), demo_retriever(), Settings())
    return asyncio.run(evaluate_graph("jade", build_graph("jade"), items, ctx, out, concurrency=2,
                                      progress="off"))


def no_model_policy():
    def refuse(request):
        raise AssertionError("a finished eval must not call the model")
    return ScriptedPolicy({"planner": refuse, "AG": refuse})


# -- 1. records and every line separator ------------------------------------------------------
@pytest.mark.parametrize("separator", SEPARATORS)
def test_a_record_holding_a_line_separator_is_one_line_and_reads_back(separator, tmp_path):
    record = {"id": f"q{separator}1", "question": f"a{separator}b", "answer": f"{separator}"}
    path = tmp_path / "r.jsonl"
    write_records(path, [record, {"id": "2"}])
    assert path.read_text(encoding="utf-8").count("\n") == 2
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2  # even for splitlines readers
    assert read_records(path) == [record, {"id": "2"}]


def test_lone_surrogates_are_escaped_and_read_back(tmp_path):
    line = dumps_line({"t": "x\ud800y"})
    line.encode("utf-8")  # writable as UTF-8
    assert json.loads(line) == {"t": "x\ud800y"}


def test_a_resumed_eval_with_separator_ids_appends_nothing(tmp_path):
    items = [QAExample(id=f"q{sep}", question=f"Who is Ed Wood?{sep}", golds=("yes",)) for sep in SEPARATORS[-3:]]
    run_eval(tmp_path, items)
    predictions = tmp_path / "jade" / "predictions.jsonl"
    first = predictions.read_bytes()
    for _ in range(2):
        run_eval(tmp_path, items, no_model_policy())
    assert predictions.read_bytes() == first and len(read_predictions(predictions)) == 3


def test_compare_accepts_its_own_files_with_separator_ids(tmp_path, capsys):
    data = tmp_path / "qa.jsonl"
    write_records(data, [{"id": f"q{sep}", "question": "Who is Ed Wood?", "answer": "yes"}
                         for sep in SEPARATORS[-3:]])
    assert main(["eval", "--graph", "llm_only", "--policy", "scripted", "--data", str(data), "--out",
                 str(tmp_path / "out"), "--quiet"]) == 0
    run = str(tmp_path / "out" / "llm_only")
    assert main(["compare", run, run]) == 0 and "paired over 3 questions" in capsys.readouterr().out


def test_a_failed_question_with_a_nel_id_still_gets_its_summary(tmp_path, capsys, boom_breaks_runs):
    data = tmp_path / "qa.jsonl"
    write_records(data, [{"id": "ok", "question": "Who is Ed Wood?", "answer": "yes"},
                         {"id": "bad\x85", "question": "Who is BOOM?", "answer": "yes"}])
    code = main(["eval", "--graph", "llm_only", "--policy", "scripted", "--data", str(data), "--out",
                 str(tmp_path / "out"), "--quiet"])
    assert code == 1 and (tmp_path / "out" / "summary.md").exists()
    assert "'bad\\x85'" in capsys.readouterr().err


# -- 2. a missing final newline, a torn trace ---------------------------------------------------
def test_a_complete_last_record_without_its_newline_is_kept(tmp_path):
    items = [QAExample(id="1", question="Who is Ed Wood?", golds=("yes",)),
             QAExample(id="2", question="Who is Scott Derrickson?", golds=("yes",))]
    run_eval(tmp_path, items)
    predictions = tmp_path / "jade" / "predictions.jsonl"
    predictions.write_bytes(predictions.read_bytes().rstrip(b"\n"))
    records = run_eval(tmp_path, items, no_model_policy())  # loads no model: nothing to do
    assert [r["id"] for r in records] == ["1", "2"]
    append_records(predictions, [])
    assert predictions.read_bytes().endswith(b"}\n") and len(read_lines(predictions).records) == 2


def test_a_torn_trace_file_makes_its_question_run_again(tmp_path):
    items = [QAExample(id="1", question="Who is Ed Wood?", golds=("yes",))]
    [record] = run_eval(tmp_path, items)
    trace = tmp_path / record["trace_path"]
    trace.write_bytes(trace.read_bytes()[:-40])
    assert read_finished(tmp_path / "jade" / "predictions.jsonl") == {}
    [again] = run_eval(tmp_path, items)
    assert again["id"] == "1" and len(read_predictions(tmp_path / "jade" / "predictions.jsonl")) == 1
    assert read_lines(trace).torn_tail is False


# -- 3. folders that are not ragteam's --------------------------------------------------------
def test_eval_refuses_a_users_folder_and_leaves_it_alone(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.md").write_text("my notes")
    assert main(["eval", "--graph", "llm_only", "--policy", "scripted", "--limit", "1", "--out", str(mine)]) == 2
    assert "not a ragteam eval folder" in capsys.readouterr().err
    assert (mine / "summary.md").read_text() == "my notes" and sorted(os.listdir(mine)) == ["summary.md"]


@pytest.mark.parametrize("name", ["summary.md", "llm_only/predictions.jsonl"])
def test_eval_never_writes_through_a_symlink_under_its_folder(name, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["eval", "--graph", "llm_only", "--policy", "scripted", "--limit", "1", "--out", str(out),
                 "--quiet"]) == 0
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (out / name).unlink()
    (out / name).symlink_to(target)
    if name.endswith(".jsonl"):  # an unfinished eval, so the folder is written again
        (out / "llm_only" / "traces").rename(out / "old_traces")
    assert main(["eval", "--graph", "llm_only", "--policy", "scripted", "--limit", "2", "--out", str(out),
                 "--quiet"]) == 2
    assert "symlink" in capsys.readouterr().err and target.read_text() == "keep me"


def test_a_fresh_training_run_refuses_an_old_run_folder(tmp_path, capsys):
    from trainers import ppo_graph

    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    assert ppo_graph.main(["--out", str(out), "--quiet"]) == 2
    assert "already holds a training run" in capsys.readouterr().err
    assert (out / "metrics.jsonl").read_text() == '{"step": 1, "reward": 0.5}\n'


def test_export_refuses_a_users_hf_folder(tmp_path, capsys):
    from trainers import ppo_graph
    from trainers.learner.checkpoint import export_hf

    from stores.owned import TRAINING, claim

    hf = claim(tmp_path / "run", TRAINING) / "hf"  # a ragteam run folder, a user's hf/ in it
    hf.mkdir()
    (hf / "notes.txt").write_text("mine")
    assert ppo_graph.main(["--out", str(tmp_path / "run"), "--quiet"]) == 2  # before any work
    assert "not a ragteam exported model folder" in capsys.readouterr().err
    with pytest.raises(ForeignPathError):
        export_hf(None, None, hf)
    assert (hf / "notes.txt").read_text() == "mine"


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    write_records(path, [{"id": "a", "title": "Paris", "text": "Paris is the capital of France."},
                         {"id": "b", "title": "Rome", "text": "Rome is the capital of Italy."}])
    return path


def test_index_refuses_look_alikes_and_user_additions(corpus, tmp_path):
    from stores.index import IndexPathError, build_index

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


def test_owned_folder_rules(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for path in (afile, afile / "sub", ""):
        with pytest.raises(ForeignPathError):
            check_owned(path, EVAL)
    assert check_owned(tmp_path / "new", EVAL) == tmp_path / "new"


# -- 4. resume restores its run ----------------------------------------------------------------
def test_resume_loads_the_saved_config_and_refuses_contradictions(tmp_path):
    from trainers import ppo_graph
    from trainers.config import from_dict

    out = tmp_path / "run"
    out.mkdir()
    saved = from_dict({"graph": "vanilla_rag", "out": str(out), "lr": 3e-5, "optimizer": "torch",
                       "steps": 2, "ppo": {"epochs": 2}})
    (out / "run_config.json").write_text(json.dumps(saved.to_dict()))
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    parse = lambda *flags: ppo_graph.config_from_args(ppo_graph.parser().parse_args(  # noqa: E731
        ["--out", str(out), "--resume", *flags]))
    config = parse()
    assert (config.graph, config.lr, config.optimizer, config.ppo.epochs) == ("vanilla_rag", 3e-5, "torch", 2)
    assert parse("--steps", "5").steps == 5  # a resumed run may run longer
    with pytest.raises(ValueError, match=r"started with lr=3e-05; this command asks for lr=0.001"):
        parse("--lr", "1e-3")
    with pytest.raises(ValueError, match=r"ppo.epochs=2; this command asks for ppo.epochs=1"):
        parse("--epochs", "1")
    assert parse("--lr", "3e-5").lr == 3e-5  # agreeing with the run is fine


# -- 5. the recipe is checked whole before any work ---------------------------------------------
RECIPE_BAD = {
    "engine: nope": {"engine": "nope"}, "concurrency: -1": {"concurrency": -1},
    "round epochs -1": {"rounds": [{"questions": 1, "temperature": 0.7, "min_f1": 0.5, "epochs": -1, "lr": 1e-5}]},
    "ppo.steps: -1": {"ppo": {"steps": -1}}, "corpus missing": {"corpus": "/nonexistent.jsonl"},
    "graph: nope": {"graph": "nope"}, "rounds a string": {"rounds": "abc"},
    "eval data missing": {"eval_data": "/nonexistent.jsonl"}, "unknown key": {"epochs": 3},
}


@pytest.mark.parametrize("case", sorted(RECIPE_BAD))
def test_a_bad_recipe_is_refused_before_any_stage(case, tmp_path):
    import yaml

    data = ROOT / "stores" / "data"
    config = {"graph": "jade", "eval_data": str(data / "hotpotqa_dev53_questions.jsonl"),
              "train_data": str(data / "hotpotqa_dev53_questions.jsonl"),
              "corpus": str(data / "hotpotqa_dev53_corpus.jsonl"), **RECIPE_BAD[case]}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run([sys.executable, "examples/learning_recipe.py", "--config", str(tmp_path / "r.yaml"),
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-1500:]
    assert done.stderr.startswith("learning_recipe: ") and not (tmp_path / "out").exists()


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "graph: jade\ngraph: jade\n"])
def test_empty_list_shaped_or_duplicated_recipes_are_refused(text, tmp_path):
    (tmp_path / "r.yaml").write_text(text)
    done = subprocess.run([sys.executable, "examples/learning_recipe.py", "--config", str(tmp_path / "r.yaml"),
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-1500:]


# -- 6. exit 2 with a message, never a traceback ------------------------------------------------
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


def test_sft_refuses_bad_records_naming_them(finished_eval, tmp_path):
    records = read_records(finished_eval / "predictions.jsonl")
    for name, edit in {"no trace_path": lambda r: {k: v for k, v in r.items() if k != "trace_path"},
                       "f1 text": lambda r: {**r, "f1": "1"}, "a list": lambda r: [1, 2]}.items():
        folder = tmp_path / name.replace(" ", "_") / "llm_only"
        folder.mkdir(parents=True)
        write_records(folder / "predictions.jsonl", [edit({**records[0], "f1": 1.0})])
        done = subprocess.run([sys.executable, "trainers/sft_graph.py", "--traces", str(folder.parent),
                               "--min-f1", "0", "--out", str(tmp_path / "sft")], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (name, done.stderr[-1500:])
        assert "predictions.jsonl" in done.stderr, name


def test_a_trace_with_bad_token_ids_is_named(tmp_path):
    from nodes.tracing import read_jsonl

    call = {"run_id": "r", "turn": 0, "step": 0, "role": "AG", "node_path": "p", "task_id": "0",
            "observation": "", "prompt_text": "", "completion_text": "", "prompt_ids": [1],
            "completion_ids": "abc", "logprobs": [], "action": None, "format_ok": True, "violation": "",
            "policy": "p", "trainable": True, "prompt_tokens": 1, "completion_tokens": 3, "latency_s": 0.0}
    write_records(tmp_path / "t.jsonl", [call])
    with pytest.raises(ValueError, match=r"t.jsonl:1: .*completion_ids"):
        read_jsonl(tmp_path / "t.jsonl")


def test_a_corrupt_chroma_index_is_one_line(tmp_path, corpus, capsys):
    from stores.index import build_index

    build_index([corpus], "chroma", tmp_path / "ix")
    (tmp_path / "ix" / "chroma" / "chroma.sqlite3").write_bytes(os.urandom(2000))
    assert main(["search", "capital", "--index", str(tmp_path / "ix")]) == 2
    assert "chroma cannot read this index" in capsys.readouterr().err


def test_a_studio_context_with_a_bad_setting_is_a_clear_error():
    with pytest.raises(ValueError, match="top_k must be an integer"):
        ContextSpec(top_k="five")


# -- 7. nothing silently accepted ---------------------------------------------------------------
@pytest.mark.parametrize("argv", [["run", ""], ["run", "   "], ["run", "q", "--temperature", "-1"],
                                  ["run", "q", "--max-rounds", "0"], ["run", "q", "--top-k", "-3"],
                                  ["run", "q", "--temperature", "nan"], ["eval", "--out", "x", "--concurrency", "0"]])
def test_bad_run_arguments_are_refused_naming_the_flag(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "error: argument" in capsys.readouterr().err


def test_a_bom_before_a_tsv_header_is_not_a_document(tmp_path):
    from stores.corpus import read_corpus

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
    from stores.index import build_index, open_index

    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "1", "title": "T\\ud800", "text": "Paris \\udfff is in France."}\n')
    build_index([path], "bm25", tmp_path / "ix")
    [doc] = open_index(tmp_path / "ix").search("Paris", 1)
    assert doc.title == "T\ufffd" and not (tmp_path / "ix.partial").exists()


@pytest.mark.parametrize("values, message", [
    ({"lora": {"r": -1}}, "lora: r must be a positive number"),
    ({"lora": {"rank": 4}}, "unknown LoRA option"),
    ({"train_roles": ["nope"]}, "train_roles: unknown role(s) nope"),
    ({"frozen_roles": ["nope"]}, "frozen_roles: unknown role(s) nope"),
    ({"fallback_workflow": "XX"}, "fallback_workflow: 'XX' is not a workflow"),
    ({"device": "cuda:abc"}, "device: use cpu, cuda, cuda:N or auto"),
    ({"ppo": {"advantage": "grpo"}}, "GRPO compares the runs of one question"),
    ({"out": ""}, "out: empty path"),
    ({"reward": {"foo": 1}}, "x.yaml: reward scheme 'jade'"),
    ({"weight_sync": "adapter"}, "weight_sync: adapter sends the LoRA adapter alone; it needs lora"),
    ({"weight_sync": "adapter", "lora": {"r": 4, "modules_to_save": ["lm_head"]}}, "no modules_to_save"),
    ({"weight_sync": "adapter", "lora": {"r": 1024}}, "serves LoRA ranks up to 512, not 1024"),
])
def test_ppo_config_values_are_checked(values, message):
    from trainers.config import from_dict

    with pytest.raises(ValueError) as error:
        from_dict(values, "x.yaml")
    assert message in str(error.value)


def test_duplicate_yaml_keys_are_refused(tmp_path):
    from trainers.config import load_config

    (tmp_path / "c.yaml").write_text("lr: 1.0e-5\nsteps: 2\nlr: 2.0e-5\n")
    with pytest.raises(ValueError, match=r"c.yaml: not valid YAML \(duplicate key\(s\) lr"):
        load_config(tmp_path / "c.yaml", {})


@pytest.mark.parametrize("flag, value", [("--min-f1", "nan"), ("--min-f1", "2"), ("--epochs", "-1"),
                                         ("--lr", "-1"), ("--minibatch-size", "0")])
def test_sft_arguments_are_checked(flag, value, tmp_path):
    from trainers import sft_graph

    with pytest.raises(SystemExit) as exit_:
        sft_graph.main(["--traces", str(tmp_path), flag, value])
    assert exit_.value.code == 2


def test_a_huge_graph_value_is_not_echoed_whole(capsys):
    assert main(["run", "q", "--policy", "scripted", "--graph", "x" * 10_000_000]) == 2
    assert len(capsys.readouterr().err) < 3000


# -- 8. Unicode where input enters ------------------------------------------------------------
def test_a_non_utf8_argument_still_gets_an_answer(tmp_path):
    done = subprocess.run([os.fsencode(sys.executable), b"-m", b"graphs.apps.cli", b"run", b"Who is Ed \xff Wood?",
                           b"--policy", b"scripted", b"--graph", b"vanilla_rag", b"--report",
                           os.fsencode(tmp_path / "r.html")], cwd=ROOT, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]
    assert "Who is Ed \ufffd Wood?" in done.stdout.decode("utf-8") and (tmp_path / "r.html").stat().st_size


def test_the_html_report_survives_a_surrogate_in_model_text(tmp_path):
    from graphs.apps.report import write_report
    from graphs.run import run

    from dataclasses import replace

    ctx = RunContext(Team(ScriptedPolicy(SIMPLE)), demo_retriever())
    graph = build_graph("vanilla_rag")
    result = replace(run(graph, "Who is Ed Wood?", ctx), answer="odd \ud800 answer")  # as an API model may say
    write_report(result, tmp_path / "r.html", graph, "vanilla_rag")
    assert "odd \ufffd answer" in (tmp_path / "r.html").read_text(encoding="utf-8")


# -- 9. progress wherever it runs -------------------------------------------------------------
def test_eval_prints_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    done = subprocess.run([sys.executable, "-m", "graphs.apps.cli", "eval", "--graph", "llm_only", "--policy",
                           "scripted", "--limit", "3", "--out", str(tmp_path / "o")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "eval llm_only: 3/3 q (100%)" in done.stderr and "ETA" in done.stderr
    quiet = subprocess.run([sys.executable, "-m", "graphs.apps.cli", "eval", "--graph", "llm_only", "--policy",
                            "scripted", "--limit", "4", "--out", str(tmp_path / "o"), "--quiet"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and "eval llm_only" not in quiet.stderr


def test_progress_lines_come_at_the_interval_and_once_at_the_end():
    import io

    from graphs.apps.progress import Progress

    stream = io.StringIO()
    progress = Progress(4, "job", "q", "lines", interval=0.0, stream=stream)
    progress.update(f1="0.5")
    progress.update()
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("job: 1/4 q (25%)") and "f1 0.5" in lines[0]
    stream = io.StringIO()
    slow = Progress(4, "job", "q", "lines", interval=3600, stream=stream)
    slow.update()
    slow.close()
    assert stream.getvalue().count("\n") == 1  # only the closing line


def test_the_trainer_prints_one_line_per_step_with_its_figures():
    from trainers.loop import step_figures

    shown = step_figures({"reward": 0.5, "f1": 0.25, "format_violation_rate": 0.1, "policy_loss": 0.01,
                          "tokens_per_s": 123.4, "lr": 2e-5})
    assert shown == {"reward": "0.500", "f1": "0.250", "viol": "0.10", "policy_loss": "0.01", "tok/s": "123"}


def test_a_training_run_reads_clearly_off_a_terminal_and_resumes_from_its_folder(tmp_path, tiny_model_dir):
    """One step on a tiny model, stderr not a terminal: a progress line per step, no DeepSpeed
    accelerator warning under the torch optimizer, the lr printed as it is; then ``--out DIR
    --resume`` alone continues that run with its own config (graph, model, optimizer)."""
    out = tmp_path / "run"
    first = subprocess.run([sys.executable, "trainers/ppo_graph.py", "--graph", "vanilla_rag", "--model",
                            tiny_model_dir, "--optimizer", "torch", "--steps", "1", "--questions-per-step", "1",
                            "--limit", "2", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "ppo vanilla_rag (embedded): 1/1 step" in first.stderr and "reward" in first.stderr
    assert "Setting accelerator" not in first.stderr and '"lr": 2e-05' in first.stdout
    again = subprocess.run([sys.executable, "trainers/ppo_graph.py", "--out", str(out), "--resume", "--steps", "2",
                            "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resumed at step 1" in again.stderr and "step (" not in again.stderr  # --quiet: no progress
    assert [row["step"] for row in read_records(out / "metrics.jsonl")] == [1, 2]
