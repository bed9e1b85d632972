import asyncio
import json

import pytest
from PIL import Image

from ragteam.graphs.apps.cli import main
from ragteam.graphs.eval.evaluate import evaluate_graph, read_finished, summarize
from ragteam.graphs.eval.metrics import normalize, score
from ragteam.graphs.methods.registry import build_graph
from ragteam.nodes.context import RunContext
from ragteam.nodes.policies.protocol import EngineError
from ragteam.nodes.policies.scripted import ScriptedPolicy, user_content
from ragteam.nodes.team import Team
from ragteam.nodes.tracing import read_jsonl
from ragteam.stores.datasets import DatasetError, read_dataset
from ragteam.stores.demo import DEMO_QUESTIONS, demo_retriever


# -- metrics ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("The  Eiffel Tower!", "eiffel tower"), ("an apple, a pear", "apple pear"),
    ("U.S.A.", "usa"), ("Theatre of the Absurd", "theatre of absurd"), ("", "")])
def test_normalization(text, expected):
    assert normalize(text) == expected


def test_scores_on_hand_computed_examples():
    s = score("the Chief of Protocol of the US", ["Chief of Protocol"])
    # pred tokens: chief of protocol of us (5); gold: chief of protocol (3); overlap 3
    assert s["precision"] == pytest.approx(3 / 5) and s["recall"] == 1.0
    assert s["f1"] == pytest.approx(2 * 0.6 / 1.6) and s["em"] == 0.0 and s["acc"] == 1.0
    assert score("Paris", ["paris."])["em"] == 1.0


def test_best_gold_counts():
    s = score("Greenwich Village", ["Greenwich Village, New York City", "Greenwich Village"])
    assert s["em"] == 1.0 and s["f1"] == 1.0


def test_yes_no_golds_are_scored_by_exact_match():
    assert score("yes", ["no"])["f1"] == 0.0
    assert score("No", ["no"])["f1"] == 1.0
    wordy = score("No, they are not from the same country.", ["no"])
    assert wordy["f1"] == 0.0 and wordy["em"] == 0.0 and wordy["acc"] == 1.0
    assert score("not sure", ["no"])["acc"] == 0.0  # whole words only: "no" is not in "not"


# -- datasets ------------------------------------------------------------------------------------
def test_dataset_formats(tmp_path):
    flash = tmp_path / "nq.jsonl"
    flash.write_text('{"id": "a", "question": "Q1?", "golden_answers": ["x", "y"], "metadata": {"k": 1}}\n')
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps([{"question": "Q2?", "answer": "z"}]))
    hotpot = tmp_path / "hotpot.json"
    hotpot.write_text(json.dumps([{"_id": "h1", "question": "Q3?", "answer": "yes", "type": "comparison",
                                   "context": [["T", ["s."]]]}]))
    assert read_dataset(flash).examples[0].golds == ("x", "y")
    assert read_dataset(plain).examples[0].id == "0"
    example = read_dataset(hotpot).examples[0]
    assert example.id == "h1" and example.metadata == {"type": "comparison"}


def test_bad_records_name_file_and_line_or_are_skipped(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "ok?", "answer": "a"}\n{"question": ""}\n{broken\n{"question": "b?", "answer": 3}\n')
    with pytest.raises(DatasetError, match=r"d.jsonl:2: missing or empty 'question'"):
        read_dataset(path)
    dataset = read_dataset(path, skip_bad=True)
    assert len(dataset.examples) == 1 and len(dataset.skipped) == 3
    assert "d.jsonl:3: invalid JSON" in dataset.skipped[1]


# -- the harness ----------------------------------------------------------------------------------
class Crash(BaseException):
    """A kill: like KeyboardInterrupt it is not an error of one question, so the eval stops."""


def answering_policy(crash_on: str | None = None):
    def answer(request):
        if crash_on and crash_on in user_content(request):
            raise Crash("simulated kill")
        return "<answer>yes</answer>"
    return ScriptedPolicy({"planner": "<workflow>RA,AG</workflow>", "AG": answer})


def test_resume_after_a_killed_run_gives_the_same_summary(tmp_path):
    examples = read_dataset(DEMO_QUESTIONS).examples[:6]
    graph = build_graph("jade")

    def evaluate(out, policy):
        ctx = RunContext(Team(policy), demo_retriever())
        return asyncio.run(evaluate_graph("jade", graph, examples, ctx, out, concurrency=1, progress=False))

    whole = evaluate(tmp_path / "whole", answering_policy())
    with pytest.raises(Crash):
        evaluate(tmp_path / "resumed", answering_policy(crash_on=examples[3].question))
    assert len(read_finished(tmp_path / "resumed" / "jade" / "predictions.jsonl")) == 3
    with open(tmp_path / "resumed" / "jade" / "predictions.jsonl", "a") as handle:
        handle.write('{"id": "half-writ')  # a kill in the middle of a write
    resumed = evaluate(tmp_path / "resumed", answering_policy())
    strip = lambda row: {**row.__dict__, "costs": {k: v for k, v in row.costs.items() if k != "wall_time_s"}}  # noqa: E731
    assert strip(summarize("jade", "d", resumed)) == strip(summarize("jade", "d", whole))
    assert [r["id"] for r in resumed] == [e.id for e in examples]


def test_a_dead_engine_stops_the_eval_with_its_cause_and_a_rerun_resumes(tmp_path, monkeypatch, capsys):
    """A backend failure is not one question's failure: the eval stops (exit 2, the cause named)
    instead of recording every later question as failed, and a rerun finishes the rest."""
    examples = read_dataset(DEMO_QUESTIONS).examples[:5]

    def engine(dies_on: str | None):
        def answer(request):
            if dies_on and dies_on in user_content(request):
                raise EngineError("vLLM engine failed: EngineDeadError: engine core died")
            return "<answer>yes</answer>"
        return ScriptedPolicy({"planner": "<workflow>RA,AG</workflow>", "AG": answer})

    out = tmp_path / "eval"
    args = ["eval", "--graph", "jade", "--policy", "offline", "--limit", "5", "--concurrency", "1",
            "--out", str(out)]
    monkeypatch.setattr("ragteam.nodes.policies.spec.load_policy", lambda *a: engine(examples[2].question))
    assert main(args) == 2
    assert "engine core died" in capsys.readouterr().err
    assert len(read_finished(out / "jade" / "predictions.jsonl")) == 2
    assert not (out / "jade" / "failures.jsonl").exists()  # nothing was blamed on the questions
    monkeypatch.setattr("ragteam.nodes.policies.spec.load_policy", lambda *a: engine(None))
    assert main(args) == 0
    assert [r["id"] for r in map(json.loads, (out / "jade" / "predictions.jsonl").read_text().splitlines())] \
        == [e.id for e in examples]


def test_cli_eval_writes_records_summary_and_plots(tmp_path):
    out = tmp_path / "eval"
    assert main(["eval", "--graph", "jade,vanilla_rag", "--policy", "scripted", "--limit", "4",
                 "--concurrency", "4", "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "| jade | hotpotqa_dev53_questions | 4 |" in summary and "| vanilla_rag |" in summary
    records = [json.loads(line) for line in (out / "jade" / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all((out / r["trace_path"]).exists() for r in records)
    assert records[0]["topologies"] == ["RA,AG"] and "f1" in records[0]
    for png in ("f1_vs_cost.png", "topologies.png"):
        assert Image.open(out / png).size[0] > 300
    assert main(["eval", "--graph", "nope", "--policy", "scripted", "--out", str(out)]) == 2


def test_a_rerun_over_a_finished_eval_loads_no_model(tmp_path):
    out = tmp_path / "eval"
    args = ["eval", "--graph", "jade,vanilla_rag", "--limit", "2", "--out", str(out)]
    assert main([*args, "--policy", "scripted"]) == 0
    before = (out / "jade" / "predictions.jsonl").read_text()
    assert main([*args, "--policy", "hf:/nowhere"]) == 0  # loading it would fail: no model there
    assert (out / "jade" / "predictions.jsonl").read_text() == before
    assert main([*args, "--limit", "3", "--policy", "hf:/nowhere"]) == 2  # a new question needs it


def test_frozen_policy_serves_only_the_methods_frozen_roles(tmp_path, tiny_model_dir):
    """MAO-ARAG freezes its executors: with --frozen-policy they run on that model while the
    planner stays on --policy; JADE freezes nothing, so every call stays on --policy."""
    out = tmp_path / "eval"
    assert main(["eval", "--graph", "mao_arag,jade", "--policy", "scripted", "--frozen-policy",
                 f"hf:{tiny_model_dir}", "--limit", "2", "--max-rounds", "2", "--out", str(out)]) == 0
    served = {}
    for graph in ("mao_arag", "jade"):
        for record in read_finished(out / graph / "predictions.jsonl").values():
            for call in read_jsonl(out / record["trace_path"]):
                served.setdefault(graph, {}).setdefault(call.role, set()).add(call.policy)
    assert served["mao_arag"].pop("planner") == {"scripted-plumbing"}
    assert served["mao_arag"] and all(names == {f"hf:{tiny_model_dir}"} for names in served["mao_arag"].values())
    assert all(names == {"scripted-plumbing"} for names in served["jade"].values())


def test_one_predictions_reader_keeps_records_with_unicode_line_separators(tmp_path):
    """Every Unicode line separator may sit inside a record's text; only a torn last line is
    dropped, and any other bad line is named by file and line."""
    from ragteam.graphs.eval.evaluate import read_predictions
    from ragteam.stores.jsonl import dumps_line as json_line

    separators = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
    records = [{"id": f"q{sep}{i}", "question": f"a{sep}b", "f1": 1.0} for i, sep in enumerate(separators)]
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json_line(r) + "\n" for r in records) + '{"id": "torn', encoding="utf-8")
    assert list(read_predictions(path)) == [r["id"] for r in records]
    path.write_text(json_line(records[0]) + "\n[1, 2]\n" + json_line(records[1]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"predictions.jsonl:2: not a prediction record"):
        read_predictions(path)


def test_a_second_evaluation_into_the_same_folder_is_refused_while_the_first_runs(tmp_path):
    """Two evaluations of one graph into one --out interleaved their records (439 for 400
    questions) and left a folder every later eval refused: the second now stops before writing."""
    import subprocess
    import sys

    from ragteam.stores.folder_lock import FolderBusyError, exclusive

    examples = read_dataset(DEMO_QUESTIONS).examples[:2]
    graph = build_graph("jade")
    ctx = RunContext(Team(answering_policy()), demo_retriever())
    asyncio.run(evaluate_graph("jade", graph, examples, ctx, tmp_path, concurrency=1, progress=False))
    before = (tmp_path / "jade" / "predictions.jsonl").read_bytes()
    holder = subprocess.Popen(  # another process holding the folder, as a running eval does
        [sys.executable, "-c", "import sys, time; from ragteam.stores.folder_lock import exclusive\n"
         "with exclusive(sys.argv[1], 'evaluation'):\n    print('held', flush=True); time.sleep(60)",
         str(tmp_path / "jade")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        more = read_dataset(DEMO_QUESTIONS).examples[:4]
        with pytest.raises(FolderBusyError, match=f"pid {holder.pid}"):
            asyncio.run(evaluate_graph("jade", graph, more, ctx, tmp_path, concurrency=1, progress=False))
        assert (tmp_path / "jade" / "predictions.jsonl").read_bytes() == before
    finally:
        holder.kill()
        holder.wait()
    with exclusive(tmp_path / "jade", "evaluation"):  # released when its holder died
        pass
    assert len(asyncio.run(evaluate_graph("jade", graph, more, ctx, tmp_path, concurrency=1, progress=False))) == 4
