"""The training entry scripts end to end: PPO with the real offline model on the DeepSpeed
backend, SFT on eval traces, and bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def run(*args, timeout=900):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def scripted_traces(graph: str, limit: int, out: Path) -> Path:
    """``ragteam eval`` of ``graph`` with the scripted team on the first ``limit`` questions."""
    made = subprocess.run([str(Path(sys.executable).with_name("ragteam")), "eval", "--graph", graph, "--policy",
                           "scripted", "--limit", str(limit), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    return out


@pytest.mark.slow
def test_two_ppo_steps_with_the_real_model_on_your_own_graph_then_serve_the_result(tmp_path):
    """The tutorial's graph (a role and a graph from the user's own file) trained like a built-in
    method on the DeepSpeed optimizer: every role's calls, the new verifier's included, reach the
    update; checkpoints, curve and TensorBoard are written; the export serves. (JADE's own
    real-model PPO steps run in tests/test_vllm.py and tests/test_ray_backend.py.)"""
    out = tmp_path / "ppo"
    done = run("trainers/ppo_graph.py", "--graph", "examples/verified_rag.py:graph", "--steps", "2",
               "--questions-per-step", "1", "--limit", "2", "--temperature", "0.7", "--optimizer", "deepspeed",
               "--save-every", "2",  # one ~2 GB checkpoint (the last step's), not two
               "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["trained_transitions"] >= 3 and row["update_tokens"] > 0  # DS, AG and VF per run
        assert "format_violation_rate/VF" in row and 0.0 <= row["format_violation_rate"] <= 1.0
        assert row["tokens_per_s"] > 0 and row["value_loss"] >= 0
        assert row["step_s"] >= row["rollout_s"] + row["learn_s"]  # every phase inside the step's time
    assert (out / "checkpoints" / "latest").read_text() == "step-000002"
    saved = json.loads((out / "checkpoints" / "step-000002" / "trainer.json").read_text())["config"]
    assert saved["graph"] == str(ROOT / "examples" / "verified_rag.py") + ":graph"  # resumable from anywhere
    assert (out / "learning_curve.png").stat().st_size > 0
    assert list((out / "tensorboard").iterdir())
    served = subprocess.run([str(Path(sys.executable).with_name("ragteam")), "run", "--policy", f"hf:{out / 'hf'}",
                             "--graph", "examples/verified_rag.py:graph", "--json", "Who directed the film Ed Wood?"],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert served.returncode == 0, served.stderr[-2000:]
    assert "verdict" in json.loads(served.stdout.strip().splitlines()[-1])["outputs"]


@pytest.mark.slow  # a chain of scripts (or a dense index built twice): tens of seconds
def test_sft_on_eval_traces_lowers_the_loss(tmp_path, tiny_model_dir):
    traces = scripted_traces("apex", 3, tmp_path / "eval")
    out = tmp_path / "sft"
    done = run("trainers/sft_graph.py", "--traces", str(traces), "--min-f1", "0", "--model", tiny_model_dir,
               "--optimizer", "torch", "--lr", "1e-2", "--epochs", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[-1]["nll"] < rows[0]["nll"]
    assert all(k.split("/")[1].startswith("apex_") for k in rows[1] if k.startswith("nll/"))
    assert (out / "hf" / "config.json").exists()
    nothing = run("trainers/sft_graph.py", "--traces", str(traces), "--roles", "planner", "--out", str(tmp_path / "x"))
    assert nothing.returncode == 2 and "no successful calls" in nothing.stderr

    # one role's calls as its own adapter, the model's weights untouched: what serves the role over
    # a model the other roles keep (adapters:OUT/adapters)
    out = tmp_path / "sft_adapter"
    done = run("trainers/sft_graph.py", "--traces", str(traces), "--min-f1", "0", "--model", tiny_model_dir,
               "--adapter", "query=apex_query", "--lora-r", "4", "--lr", "1e-2", "--epochs", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["nll"] < rows[0]["nll"]
    assert [k for k in rows[1] if k.startswith("nll/")] == ["nll/apex_query"]  # no other role's calls
    export = out / "adapters"
    assert json.loads((export / "roles.json").read_text()) == {"base_model": tiny_model_dir,
                                                               "adapters": {"query": ["apex_query"]}}
    from safetensors.torch import load_file

    lora = load_file(export / "query" / "adapter_model.safetensors")
    assert any(name.endswith("lora_B.weight") and tensor.abs().sum() > 0 for name, tensor in lora.items())
    assert not (out / "hf").exists()
    bad = run("trainers/sft_graph.py", "--traces", str(traces), "--adapter", "a=apex_query", "--adapter",
              "b=apex_query", "--out", str(tmp_path / "y"))
    assert bad.returncode == 2 and "role apex_query is in two adapters" in bad.stderr


@pytest.mark.slow  # an eval, then a fine-tune
def test_the_hindsight_reader_commands_of_docs_train_md(tmp_path, tiny_model_dir):
    """docs/train.md's two commands (a scripted team and a tiny model in place of the real
    ones): the answer calls whose documents held the gold answers become the reader adapter's
    training set, and the adapter is exported for the roles it names."""
    traces = scripted_traces("vanilla_rag", 8, tmp_path / "t")
    out = tmp_path / "reader"
    done = run("trainers/sft_graph.py", "--traces", str(traces), "--select", "hindsight-answers", "--adapter", "reader=AG,AS",
               "--model", tiny_model_dir, "--epochs", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    selected = json.loads(next(line for line in done.stdout.splitlines() if line.startswith('{"selected_calls"')))
    assert selected["hindsight-answers/calls/AG"] == selected["selected_calls"] > 0  # vanilla RAG: whole-question answers only
    assert json.loads((out / "adapters" / "roles.json").read_text())["adapters"] == {"reader": ["AG", "AS"]}


def test_bad_dataset_line_is_named_before_any_model_loads(tmp_path, capsys):
    from ragteam.trainers.ppo_graph import main as ppo_graph

    data = tmp_path / "qa.jsonl"
    data.write_text('{"question": "ok?", "answer": "yes"}\n{"question": "", "answer": "x"}\n')
    assert ppo_graph(["--data", str(data), "--steps", "1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{data}:2" in err and "question" in err
    assert ppo_graph(["--graph", "nope", "--out", str(tmp_path / "o")]) == 2
    assert "unknown graph" in capsys.readouterr().err


def test_ragteam_train_runs_the_same_trainers_as_the_scripts(tmp_path, capsys):
    """``ragteam train ppo ARGS`` is ``python trainers/ppo_graph.py ARGS``: the same checks, the
    same exit status; each trainer's help names the subcommand."""
    from ragteam.graphs.apps.cli import main

    data = tmp_path / "qa.jsonl"
    data.write_text('{"question": "ok?", "answer": "yes"}\n{"question": "", "answer": "x"}\n')
    assert main(["train", "ppo", "--data", str(data), "--steps", "1", "--out", str(tmp_path / "o")]) == 2
    assert f"{data}:2" in capsys.readouterr().err
    for trainer in ("ppo", "sft", "learn-check", "recipe"):
        with pytest.raises(SystemExit) as done:
            main(["train", trainer, "--help"])
        assert done.value.code == 0 and f"ragteam train {trainer}" in capsys.readouterr().out


def test_rejection_sampling_keeps_good_runs_and_relabels_a_broken_plan_to_its_fallback(tmp_path):
    """Only runs scoring ≥ min_f1 count; their valid calls are kept as recorded, a broken planner
    reply becomes the workflow the runtime fell back to (when asked), other broken calls stay out."""
    from ragteam.nodes.tracing import Transition, write_jsonl
    from ragteam.trainers.algorithms.sft import planner_fallback_relabel, planner_reply, successful_transitions

    def call(role, ok, ids):
        return Transition(run_id="r", turn=1, step=0, role=role, node_path=f"0/{role}", task_id="0",
                          observation="", prompt_text="p", completion_text="c", prompt_ids=[1, 2],
                          completion_ids=ids, logprobs=[-0.1] * len(ids), action=None, format_ok=ok,
                          violation="" if ok else "broken", policy="x", trained=True,
                          prompt_tokens=2, completion_tokens=len(ids), latency_s=0.0)

    folder = tmp_path / "eval" / "jade"
    (folder / "traces").mkdir(parents=True)
    records = []
    for qid, f1 in (("good", 0.8), ("bad", 0.2)):
        write_jsonl([call("planner", False, [9, 9]), call("QR", False, [7]), call("AG", True, [5, 6])],
                    folder / "traces" / f"{qid}.jsonl")
        records.append({"id": qid, "f1": f1, "trace_path": f"jade/traces/{qid}.jsonl"})
    (folder / "predictions.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")

    class Tokenizer:
        def encode(self, text, add_special_tokens):
            assert text == "<workflow>RA,AG</workflow>" and not add_special_tokens
            return [40, 41, 42]

    plain, counts = successful_transitions([tmp_path / "eval"], 0.5, None)
    assert [(e.role, e.completion_ids) for e in plain] == [("AG", [5, 6])]
    assert counts["runs"] == 2 and counts["successful_runs"] == 1
    with pytest.raises(ValueError, match="one method whose planner picks workflows"):
        planner_reply(["vanilla_rag", "no_such_folder"])
    relabel = planner_fallback_relabel(Tokenizer(), planner_reply(["jade", "vanilla_rag"]), "RA,AG")
    items, counts = successful_transitions([tmp_path / "eval"], 0.5, None, relabel)
    assert [(e.role, e.completion_ids) for e in items] == [("planner", [40, 41, 42]), ("AG", [5, 6])]
    assert counts["relabelled/planner"] == 1 and "relabelled/QR" not in counts


def test_hindsight_answers_teach_every_gold_name_the_documents_held_whatever_the_run_scored(tmp_path):
    """An answer call on the run's own question whose documents name every gold answer learns
    to give them all, even from a run that scored 0; a call missing one name, a call on a
    sub-question, and a question whose gold is a count teach nothing."""
    from ragteam.nodes.tracing import Transition, write_jsonl
    from ragteam.trainers.algorithms.sft import hindsight_answer_transitions

    def call(role, observation):
        return Transition(run_id="r", turn=1, step=0, role=role, node_path=f"0/{role}", task_id="0",
                          observation=observation, prompt_text="p", completion_text="c",
                          prompt_ids=[1, 2], completion_ids=[5], logprobs=[-0.1], action=None,
                          format_ok=True, violation="", policy="x", trained=True, prompt_tokens=2,
                          completion_tokens=1, latency_s=0.0)

    question = "Who is the friend of Ann Lee?"
    held = f"Documents:\n[0] Ann Lee: Her friends are Bo Dee and Cy Fox.\n\nQuestion: {question}"
    runs = {  # id: (gold names, f1, calls)
        "listed": (["Bo Dee", "Cy Fox"], 0.0, [call("AG", held), call("DS", held),
                                                 call("AG", "Documents:\n[0] Bo Dee, Cy Fox\n\n"
                                                            "Question: Who is #1?")]),
        "one_missing": (["Bo Dee", "Cy Foxx"], 0.0, [call("AG", held)]),  # 'Cy Foxx' is not 'Cy Fox'
        "count": (["2"], 0.0, [call("AG", held)]),
    }
    folder = tmp_path / "eval" / "vanilla_rag"
    (folder / "traces").mkdir(parents=True)
    records = []
    for qid, (golds, f1, calls) in runs.items():
        write_jsonl(calls, folder / "traces" / f"{qid}.jsonl")
        records.append({"id": qid, "question": question, "golds": golds, "f1": f1,
                        "trace_path": f"vanilla_rag/traces/{qid}.jsonl"})
    (folder / "predictions.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")

    class Tokenizer:
        def encode(self, text, add_special_tokens):
            assert not add_special_tokens
            return [ord(c) for c in text]

    items, counts = hindsight_answer_transitions([tmp_path / "eval"], Tokenizer())
    assert [("".join(map(chr, e.completion_ids)), e.group, e.old_logprobs) for e in items] == [
        ("<answer>Bo Dee, Cy Fox</answer>", "listed", [])]
    assert counts == {"runs": 3, "runs_without_names": 1, "calls_without_evidence": 1, "calls/AG": 1,
                      "targets_listing_several": 1, "targets_already_given": 0}


@pytest.mark.slow  # a chain of scripts: an eval, then three fine-tunes
def test_sft_interrupted_within_an_epoch_resumes_there_and_ends_with_the_same_weights(
        tmp_path, tiny_model_dir, monkeypatch):
    """A fine-tune longer than a sitting: killed right after a checkpoint inside its first epoch,
    ``--resume`` takes the remaining mini-batches of that epoch (same shuffle, same optimizer
    state) and the run ends with exactly the weights of one never interrupted."""
    from safetensors.torch import load_file

    from ragteam.graphs.apps.cli import main as ragteam
    from ragteam.trainers.learner import checkpoint
    from ragteam.trainers.sft_graph import main as sft_graph

    traces = tmp_path / "eval"
    assert ragteam(["eval", "--graph", "apex", "--policy", "scripted", "--limit", "3", "--out", str(traces),
                    "--quiet"]) == 0
    flags = ["--traces", str(traces), "--min-f1", "0", "--model", tiny_model_dir, "--optimizer", "torch",
             "--lr", "1e-2", "--epochs", "2", "--minibatch-size", "2"]
    assert sft_graph([*flags, "--out", str(tmp_path / "whole")]) == 0

    saves, save = [], checkpoint.save_checkpoint

    def save_then_die(root, step, optimizer, state, **kw):
        saves.append(state)
        folder = save(root, step, optimizer, state, **kw)
        if len(saves) == 2:
            raise KeyboardInterrupt  # the sitting ends right after a checkpoint
        return folder

    monkeypatch.setattr(checkpoint, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        sft_graph([*flags, "--out", str(tmp_path / "cut"), "--save-every", "1"])
    assert [(s["cursor"], s["minibatch"]) for s in saves] == [(0, 1), (0, 2)]  # inside epoch 1
    monkeypatch.setattr(checkpoint, "save_checkpoint", save)
    assert sft_graph([*flags, "--out", str(tmp_path / "cut"), "--resume"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    whole = load_file(str(tmp_path / "whole" / "hf" / "model.safetensors"))
    resumed = load_file(str(tmp_path / "cut" / "hf" / "model.safetensors"))
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[name], resumed[name]) for name in whole)
