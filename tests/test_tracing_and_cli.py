import json
import subprocess
import sys

import pytest

from ragteam.graphs.apps.cli import main
from ragteam.graphs.methods.jade import build_jade_graph
from ragteam.graphs.run import run
from ragteam.nodes.tracing import read_jsonl, render_tree, write_jsonl
from ragteam.stores.jsonl import write_records


def test_transitions_round_trip_through_json_lines(make_ctx, tmp_path):
    ctx = make_ctx({"planner": "<workflow>QR,RA,DS,AG</workflow>", "QR": "<query>Temple</query>",
                    "DS": "<id>0</id>", "AG": "<answer>Shirley Temple</answer>"})
    result = run(build_jade_graph(), "Who is Shirley Temple?", ctx)
    path = tmp_path / "trace.jsonl"
    write_jsonl(result.transitions, path)
    assert read_jsonl(path) == result.transitions
    first = json.loads(path.read_text().splitlines()[0])
    for field in ("run_id", "turn", "step", "role", "node_path", "observation", "prompt_ids",
                  "completion_ids", "logprobs", "action", "format_ok", "prompt_tokens"):
        assert field in first
    assert first["action"] == "QR,RA,DS,AG"


def test_reading_a_broken_trace_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"run_id": "x"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1"):
        read_jsonl(path)


def test_trace_tree_shows_rounds_roles_and_violations(make_ctx):
    ctx = make_ctx({"planner": "nonsense", "AG": "<answer>x</answer>"})
    result = run(build_jade_graph(), "Who?", ctx)
    tree = render_tree(result.transitions)
    assert tree.splitlines()[0] == "turn 1"
    assert "planner  ✗ no <workflow> tag — said: nonsense" in tree and "AG" in tree


def test_cli_run_with_scripted_policy(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    assert main(["run", "--policy", "scripted", "--trace-out", str(out),
                 "Who portrayed Corliss Archer in the film Kiss and Tell?"]) == 0
    printed = capsys.readouterr().out
    assert "Answer   : Kiss and Tell (1945 film)" in printed  # the plumbing policy's rule
    assert "Round 1 [0] RA,AG" in printed and "retrieval_calls=1" in printed
    assert len(read_jsonl(out)) == 2


def test_cli_reports_bad_input_without_a_traceback(capsys, tmp_path):
    assert main(["run", "--graph", "nope", "--policy", "scripted", "q"]) == 2
    assert "unknown graph 'nope'" in capsys.readouterr().err
    assert main(["run", "--policy", "gpt", "q"]) == 2
    assert "unknown policy 'gpt'" in capsys.readouterr().err
    assert main(["search", "--index", str(tmp_path / "missing"), "q"]) == 2
    assert "not a ragteam index" in capsys.readouterr().err


@pytest.mark.slow
def test_console_script_runs_the_offline_model(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "ragteam.graphs.apps.cli", "run", "--json", "--max-rounds", "2",
         "Were Scott Derrickson and Ed Wood of the same nationality?"],
        capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["answer"] and result["topologies"] and result["costs"]["llm_calls"] >= 2


def test_a_trace_written_before_trained_had_its_name_loads(tmp_path):
    """Traces on disk from before the rename call the field ``trainable``: read as ``trained``."""
    call = {"run_id": "r", "turn": 0, "step": 0, "role": "AG", "node_path": "p", "task_id": "0",
            "observation": "", "prompt_text": "", "completion_text": "x", "prompt_ids": [1],
            "completion_ids": [2], "logprobs": [-0.1], "action": "x", "format_ok": True, "violation": "",
            "policy": "p", "trainable": False, "prompt_tokens": 1, "completion_tokens": 1, "latency_s": 0.0}
    write_records(tmp_path / "old.jsonl", [call, {**call, "step": 1, "trainable": True}])
    assert [t.trained for t in read_jsonl(tmp_path / "old.jsonl")] == [False, True]
    assert "trainable" not in json.loads(read_jsonl(tmp_path / "old.jsonl")[0].to_json())


def test_a_trace_with_bad_token_ids_is_named(tmp_path):
    from ragteam.nodes.tracing import read_jsonl

    call = {"run_id": "r", "turn": 0, "step": 0, "role": "AG", "node_path": "p", "task_id": "0",
            "observation": "", "prompt_text": "", "completion_text": "", "prompt_ids": [1],
            "completion_ids": "abc", "logprobs": [], "action": None, "format_ok": True, "violation": "",
            "policy": "p", "trained": True, "prompt_tokens": 1, "completion_tokens": 3, "latency_s": 0.0}
    write_records(tmp_path / "t.jsonl", [call])
    with pytest.raises(ValueError, match=r"t.jsonl:1: .*completion_ids"):
        read_jsonl(tmp_path / "t.jsonl")


def test_every_call_records_the_weight_version_its_policy_sampled_under(make_ctx):
    import asyncio

    from ragteam.graphs.methods import get_method
    from ragteam.graphs.run import arun
    from ragteam.nodes.policies.scripted import ScriptedPolicy

    policy = ScriptedPolicy({"planner": "<workflow>RA,AG</workflow>", "AG": "<answer>x</answer>"})
    policy.weight_version = 7  # what a backend sets after a sync
    result = asyncio.run(arun(get_method("jade").graph(), "Who?", make_ctx(policy)))
    assert result.transitions and {t.weight_version for t in result.transitions} == {7}
