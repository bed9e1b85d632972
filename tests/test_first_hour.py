"""A newcomer's first hour: what help() says, the tutorial graph through every CLI door, pictures
without ragteam's bookkeeping, an honest ETA, and checkpoints that do not fill the disk."""

import dataclasses
import io
import json
import operator
import re
import shlex
import sys
import typing
from pathlib import Path

import pytest

import ragteam as rt
from ragteam.graphs.apps.cli import _parser, main
from ragteam.graphs.apps.drawing import graph_parts, mermaid
from ragteam.graphs.methods import get_method

ROOT = Path(__file__).resolve().parents[1]
FIRST = "examples/my_first_graph.py:graph"
GUIDE = ROOT / "docs" / "compose_your_own_graph.md"
QUESTION = "Who portrayed Corliss Archer in the film Kiss and Tell?"


# -- help() ----------------------------------------------------------------------------------------
def test_help_on_a_role_describes_every_field():
    doc = rt.Role.__doc__
    missing = [f.name for f in dataclasses.fields(rt.Role) if f"``{f.name}``" not in doc]
    assert not missing


def test_the_plumbing_rule_type_is_public_and_says_what_it_takes():
    from ragteam.nodes.policies.scripted import Rule

    assert "Rule" in rt.__all__ and rt.Rule is Rule
    assert typing.get_type_hints(rt.Role)["plumbing"] == typing.Optional[rt.Rule]
    doc = rt.Rule.__doc__ or ""
    assert "fixed string" in doc and "sequence" in doc and "function" in doc


def _type_text(hint) -> str:
    """``list[Document]`` for ``list[stores.documents.Document]``, ``str`` for ``<class 'str'>``."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return re.sub(r"\b[\w]+\.", "", repr(hint))


def test_help_on_the_workflow_state_lists_every_key_its_type_and_reducer():
    doc = rt.WorkflowState.__doc__
    hints = typing.get_type_hints(rt.WorkflowState, include_extras=True)
    for key, hint in hints.items():
        reducer = None
        if typing.get_origin(hint) is typing.Annotated:
            hint, reducer = typing.get_args(hint)[0], hint.__metadata__[0]
        line = next((line for line in doc.splitlines() if f"``{key}`` (" in line), "")
        assert f"``{key}`` ({_type_text(hint)})" in line, key
        if reducer is not None:  # help() never shows it: the docstring must
            assert f"reducer ``{'operator.add' if reducer is operator.add else reducer.__name__}``" in line, key
    assert "turns=3" in doc and "``stop_reason``" in doc


# -- the trace tree --------------------------------------------------------------------------------
def test_the_trace_tree_numbers_each_call_and_names_tasks_only_when_there_are_several(make_ctx):
    from ragteam.graphs.methods.jade import build_jade_graph
    from ragteam.graphs.run import run
    from ragteam.nodes.tracing import render_tree

    one = run(build_jade_graph(), "Who?", make_ctx({"planner": "<workflow>QR,RA,AG</workflow>",
                                                    "QR": "<query>who</query>", "AG": "<answer>x</answer>"}))
    tree = render_tree(one.transitions).splitlines()
    assert tree == ["turn 1", "  ├─ #1 planner  QR,RA,AG", "  ├─ #2 QR       who", "  └─ #3 AG       x"]
    split = run(build_jade_graph(), "What position did the actress who played Corliss Archer hold?", make_ctx({
        "planner": ["<workflow>QDS</workflow>", "<workflow>RA,AG</workflow>"],
        "QDS": "<q1>Who played Corliss Archer?</q1><q2>What position did #1 hold?</q2>",
        "AG": "<answer>x</answer>", "AS": "<answer>y</answer>"}))
    tree = render_tree(split.transitions)
    assert "[0]" not in tree and "#1 task 0   planner" in tree and "task 0.2 AG" in tree
    assert tree.splitlines()[-1] == f"  └─ #{len(split.transitions)} task 0   AS       y"


# -- pictures --------------------------------------------------------------------------------------
def _drawn(graph) -> list[str]:
    nodes, _, labels = graph_parts(graph)
    return sorted(labels[n] for n in nodes)


@pytest.mark.parametrize("reference, expected", [
    (FIRST, ["AG", "QR", "RA", "end", "start"]),                                        # wrapped by ragteam
    ("examples/verified_rag.py:graph", ["AG", "DS", "QR", "RA", "VF", "done", "end", "start"]),
    ("vanilla_rag", ["AG", "RA", "end", "start"]),                                      # a built-in
    ("jade", ["end", "finish", "round", "start"]),                                      # its own finish stays
])
def test_a_picture_shows_the_graph_as_written_with_one_start_and_one_end(reference, expected):
    graph = get_method(reference).graph()
    assert _drawn(graph) == expected
    assert "prepare" not in mermaid(graph) and mermaid(graph).count("__start__([") == 1


def test_subgraph_starts_are_joined_and_a_users_own_prepare_node_is_kept():
    from langgraph.graph import END, START, StateGraph

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import custom_graph
    finally:
        sys.path.remove(str(ROOT / "examples"))
    wrapped = rt.ragteam_graph(custom_graph.by_hand)  # its branches start from a Send fan-out
    nodes, edges, labels = graph_parts(wrapped)
    assert [labels[n] for n in nodes].count("start") == 1 and "prepare" not in labels.values()
    assert {(e.source, e.target) for e in edges if e.source == "__start__"} == {
        ("__start__", "as_asked:RA"), ("__start__", "keywords:KW")}

    inner = StateGraph(rt.WorkflowState)
    inner.add_node("AG", rt.answer_generator("AG"))
    inner.add_edge(START, "AG")
    builder = StateGraph(rt.WorkflowState)
    builder.add_node("prepare", lambda s: {})  # the user's own, same shape as ragteam's wrapper
    builder.add_node("inner", inner.compile())
    builder.add_node("finish", lambda s: {})
    for a, b in ((START, "prepare"), ("prepare", "inner"), ("inner", "finish"), ("finish", END)):
        builder.add_edge(a, b)
    assert {"prepare", "finish"} <= set(_drawn(builder.compile()))


# -- the eval's ETA --------------------------------------------------------------------------------
class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _last_eta(stream: io.StringIO) -> str:
    return re.findall(r"ETA (\S+?)(?:,|$)", stream.getvalue(), flags=re.M)[-1]


def test_the_eta_follows_recent_completions_not_the_warm_up():
    from ragteam.graphs.apps.progress import Progress

    clock, stream = Clock(), io.StringIO()
    progress = Progress(100, "eval", "q", "lines", interval=0.0, stream=stream, clock=clock)
    clock.now += 300  # loading the model, the first batch: nothing finishes for 5 minutes
    progress.update()
    assert _last_eta(stream) == "?"  # one completion says nothing about the pace
    for _ in range(9):  # then one every 2 s
        clock.now += 2
        progress.update()
    assert _last_eta(stream) == "3m00s"  # 90 left at 0.5 q/s (since the start it would be ~47 min)
    clock.now += 60  # a stall shows: nothing finished for a minute
    progress.line()
    assert _last_eta(stream) == "13m00s"  # 90 left at 9 q / 78 s


def test_the_eta_ignores_a_resumed_jobs_done_items_and_evens_out_bursts():
    from ragteam.graphs.apps.progress import Progress

    clock, stream = Clock(), io.StringIO()
    progress = Progress(100, "eval", "q", "lines", interval=0.0, stream=stream, clock=clock, initial=60)
    for burst in range(5):  # 8 concurrent runs finish together every 16 s
        clock.now += 16 if burst else 120
        for _ in range(8):
            clock.now += 0.01
            progress.update()
    # 4 bursts (32 q) in 64 s after the first: 0.5 q/s; 100 − 60 − 40 = 0 left is "0m00s"
    assert _last_eta(stream) == "0m00s"
    progress.total = 140
    progress.line()
    assert _last_eta(stream) == "1m20s"  # 40 left at 32 q / 64 s


# -- checkpoints -----------------------------------------------------------------------------------
class OneRank:
    is_first, size = True, 1

    def barrier(self):
        pass


class FakeOptimizer:
    """Writes a small stand-in for the engine's state."""

    ranks = OneRank()

    def save(self, folder: Path) -> None:
        (folder / "engine.bin").write_bytes(b"\0" * 3_000_000)


def test_checkpoints_keep_the_last_n_and_say_how_big_each_is(tmp_path, capsys):
    from ragteam.trainers.learner.checkpoint import human_size, latest_checkpoint, prune_checkpoints, save_checkpoint

    root = tmp_path / "checkpoints"
    root.mkdir()
    (root / "step-notes").mkdir()          # not a name the saver writes: never touched
    (root / "step-000001.txt").write_text("mine")
    for step in range(1, 5):
        save_checkpoint(root, step, FakeOptimizer(), {"cursor": step}, keep=2)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-000001.txt", "step-000003",
                                                      "step-000004", "step-notes"]
    assert latest_checkpoint(root) == root / "step-000004"
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4 and re.fullmatch(r"checkpoint step 4: 3\.0 MB \(keeping the last 2\)", lines[-1])
    # the checkpoint ``latest`` names stays, even when it is not among the newest; a folder of a
    # checkpoint's name that ragteam did not write (no trainer.json of its step) is never pruned
    (root / "latest").write_text("step-000003")
    (root / "step-000005").mkdir()
    (root / "step-000000").mkdir()
    (root / "step-000000" / "trainer.json").write_text('{"step": 7}')
    assert prune_checkpoints(root, 1) == []
    big = root / "step-1000000"  # past six digits: ordered by number, not by name
    big.mkdir()
    (big / "trainer.json").write_text('{"step": 1000000}')
    (root / "latest").write_text("step-1000000")
    assert [p.name for p in prune_checkpoints(root, 1)] == ["step-000003", "step-000004"]
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("step-0")) == [
        "step-000000", "step-000001.txt", "step-000005"]
    assert human_size(2_100_000_000) == "2.1 GB" and human_size(310_000_000) == "310 MB"


def test_the_number_of_checkpoints_kept_is_a_checked_option():
    assert rt.TrainConfig().keep_checkpoints == 2
    with pytest.raises(ValueError, match="keep_checkpoints"):
        rt.TrainConfig(keep_checkpoints=0)


# -- the guide: docs/compose_your_own_graph.md -------------------------------------------------------
def test_the_guides_graph_is_the_example_file():
    guide = GUIDE.read_text()
    code = (ROOT / "examples" / "my_first_graph.py").read_text()
    body = code[code.index("from langgraph"):].strip()
    assert body in guide
    assert len(body.splitlines()) <= 15


def test_every_command_in_the_guide_parses():
    from ragteam.trainers.ppo_graph import parser as ppo_parser

    lines = [line.split("  #")[0].strip() for block in re.findall(r"```bash\n(.*?)```", GUIDE.read_text(), re.S)
             for line in block.splitlines()]
    commands = [shlex.split(part) for line in lines for part in line.split(" && ") if part]
    ragteam = [c[1:] for c in commands if c[0] == "ragteam"]
    assert {c[0] for c in ragteam} >= {"run", "draw", "eval", "studio"}
    for argv in ragteam:
        _parser().parse_args(argv)
    ppo = [c[2:] for c in commands if c[:2] == ["python", "trainers/ppo_graph.py"]]
    assert ppo and all(ppo_parser().parse_args(argv).graph == FIRST for argv in ppo)


def test_the_first_graph_through_run_draw_and_eval(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["run", "--graph", FIRST, "--policy", "scripted", "--json", QUESTION]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["answer"] == "Kiss and Tell (1945 film)" and result["stop_reason"] == "answered"
    assert result["costs"]["llm_calls"] == 2 and result["costs"]["turns"] == 1  # QR and AG, one pass

    assert main(["draw", "--graph", FIRST, "--out", str(tmp_path / "pictures")]) == 0
    svg = (tmp_path / "pictures" / "my_first_graph.svg").read_text()
    assert all(f">{node}<" in svg for node in ("QR", "RA", "AG"))
    assert svg.count(">start<") == 1 and svg.count(">end<") == 1 and ">prepare<" not in svg

    assert main(["eval", "--graph", f"vanilla_rag,{FIRST}", "--policy", "scripted", "--limit", "2",
                 "--out", str(tmp_path / "eval"), "--quiet"]) == 0
    summary = (tmp_path / "eval" / "summary.md").read_text()
    assert "| vanilla_rag |" in summary and "| my_first_graph |" in summary
    records = (tmp_path / "eval" / "my_first_graph" / "predictions.jsonl").read_text().splitlines()
    assert len(records) == 2


@pytest.mark.slow  # a rollout and an update on a tiny random model (~40 s on 2 cores)
def test_the_first_graph_takes_one_ppo_step(tmp_path, tiny_model_dir):
    import subprocess

    out = tmp_path / "ppo"
    done = subprocess.run([sys.executable, "trainers/ppo_graph.py", "--graph", FIRST, "--steps", "1",
                           "--questions-per-step", "2", "--out", str(out), "--model", tiny_model_dir,
                           "--optimizer", "torch", "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    step = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert step["step"] == 1 and step["trained_transitions"] == 4  # QR and AG of both runs
    assert re.search(r"^checkpoint step 1: [\d.]+ [kMG]?B \(keeping the last 2\)$", done.stderr, flags=re.M)
    assert (out / "hf" / "config.json").exists()


def test_the_guides_reward_runs_as_printed():
    """A newcomer's reward needs nothing but ``ragteam`` names: the guide's block, executed as
    printed, pays the run's last call its exact match and the broken replies their penalty."""
    from ragteam.graphs.methods import make_reward

    [block] = [b for b in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S) if "class ExactMatch" in b]
    assert len(block.splitlines()) <= 20
    scope = {}
    exec(compile(block, "compose_your_own_graph.md", "exec"), scope)
    reward = make_reward("exact", scope["my_rag"])
    ctx = rt.make_context(policy="scripted")
    result = rt.run(scope["my_rag"], QUESTION, ctx)
    right = rt.QAExample("q", QUESTION, (result.answer,))
    outcome = reward(result, right)
    assert outcome.rewards[-1] == 1.0 and sum(outcome.rewards) == 1.0 and outcome.scores["em"] == 1.0
    assert reward(result, rt.QAExample("q", QUESTION, ("somebody else",))).total == 0.0
