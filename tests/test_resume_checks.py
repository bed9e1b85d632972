"""``--resume`` refuses what is not this folder's run (trust sweep): a run config that is not an
object, a saved ``out`` naming another folder, an old flag spelling compared by what it means, a
``checkpoints/latest`` that points outside the run; and a graph that gives the learner nothing to
train stops before the first update. Every refusal is one line, exit 2, no model loaded."""

import argparse
import json
import os
import textwrap

import pytest

from ragteam.stores.owned import TRAINING, claim
from ragteam.trainers import ppo_graph, sft_graph
from ragteam.trainers.config import from_dict, load_config


def must_not_start(*args, **kwargs):
    raise AssertionError("the trainer started; --resume should have refused")


def saved_run(folder, **options):
    """A run folder as a killed PPO run leaves it: ragteam's, its config, a metrics line."""
    out = claim(folder, TRAINING)
    config = from_dict({"graph": "vanilla_rag", "out": str(out), "optimizer": "torch", "steps": 2, **options})
    (out / "run_config.json").write_text(json.dumps(config.to_dict()))
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    return out


def resume(out, *flags):
    return ppo_graph.config_from_args(ppo_graph.parser().parse_args(["--out", str(out), "--resume", *flags]))


def refused(capsys, script="ppo_graph") -> str:
    err = capsys.readouterr().err
    assert err.startswith(f"{script}: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# -- 1. a run config that is not an object is a damaged run, not "no run" ------------------------
@pytest.mark.parametrize("text", ["null", "[]", "3", '"jade"', "{"])
def test_a_run_config_that_is_not_an_object_is_refused_naming_it(text, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("ragteam.trainers.loop.Trainer", must_not_start)
    out = saved_run(tmp_path / "run")
    (out / "run_config.json").write_text(text)
    assert ppo_graph.main(["--out", str(out), "--resume", "--no-progress"]) == 2
    assert str(out / "run_config.json") in refused(capsys)


def test_an_unreadable_run_config_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("ragteam.trainers.loop.Trainer", must_not_start)
    out = saved_run(tmp_path / "run")
    (out / "run_config.json").unlink()
    (out / "run_config.json").mkdir()  # unreadable as a file, whoever runs the test (root too)
    assert ppo_graph.main(["--out", str(out), "--resume", "--no-progress"]) == 2
    assert str(out / "run_config.json") in refused(capsys)


def test_a_run_without_any_config_is_not_taken_for_no_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("ragteam.trainers.loop.Trainer", must_not_start)
    out = saved_run(tmp_path / "run")
    (out / "run_config.json").unlink()  # metrics.jsonl says a run was here
    assert ppo_graph.main(["--out", str(out), "--resume", "--no-progress"]) == 2
    assert "run_config.json" in refused(capsys)


def test_a_checkpoint_config_that_is_not_an_object_is_refused(tmp_path):
    out = saved_run(tmp_path / "run")
    (out / "run_config.json").unlink()  # a run from before run_config.json: its checkpoint's config
    step = out / "checkpoints" / "step-000001"
    step.mkdir(parents=True)
    (step / "trainer.json").write_text(json.dumps({"step": 1, "cursor": 4, "config": None}))
    (out / "checkpoints" / "latest").write_text("step-000001")
    with pytest.raises(ValueError, match="trainer.json: holds null"):
        resume(out)


# -- 2. the folder given is the run ---------------------------------------------------------------
def test_a_saved_out_naming_another_folder_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("ragteam.trainers.loop.Trainer", must_not_start)
    out = saved_run(tmp_path / "run", out=str(tmp_path / "elsewhere"))
    assert ppo_graph.main(["--out", str(out), "--resume", "--no-progress"]) == 2
    err = refused(capsys)
    assert "run_config.json names out=" in err and "elsewhere" in err
    assert not (tmp_path / "elsewhere").exists()


def test_a_saved_out_relative_to_where_the_run_started_is_this_folder(tmp_path, monkeypatch):
    out = saved_run(tmp_path / "runs" / "ppo", out="runs/ppo")
    monkeypatch.chdir(tmp_path)
    assert resume("runs/ppo").out == "runs/ppo"
    monkeypatch.chdir(out)  # elsewhere, the absolute path of the same folder
    assert resume(out).out == str(out)
    saved_run(out, out="../other/ppo")
    with pytest.raises(ValueError, match=r"names out='../other/ppo', not this run folder"):
        resume(out)


# -- 3. an old spelling is refused, naming the new one --------------------------------------------
def test_the_old_backend_spelling_is_refused_naming_the_optimizer(tmp_path, capsys):
    with pytest.raises(SystemExit):
        ppo_graph.parser().parse_args(["--backend", "deepspeed"])
    assert "--backend deepspeed is now --optimizer deepspeed" in capsys.readouterr().err
    for text, message in (("backend: deepspeed\n", "backend: deepspeed is now optimizer: deepspeed"),
                          ("ray: {learner_engine: torch}\n", "ray.learner_engine is now optimizer: torch")):
        (tmp_path / "c.yaml").write_text(text)
        with pytest.raises(ValueError, match=message):
            load_config(str(tmp_path / "c.yaml"), {})


# -- 4. checkpoints/latest stays inside the run ---------------------------------------------------
def outside_pointers(tmp_path):
    """Each way a ``latest`` can reach a checkpoint outside OUT/checkpoints (one elsewhere)."""
    foreign = tmp_path / "foreign" / "step-000009"
    foreign.mkdir(parents=True)
    (foreign / "trainer.json").write_text(json.dumps({"step": 9, "cursor": 0}))

    def absolute(root):
        (root / "latest").write_text(str(foreign))

    def dotdot(root):
        (root / "latest").write_text(os.path.relpath(foreign, root))

    def linked_pointer(root):
        (tmp_path / "foreign" / "latest").write_text("step-000009")
        (root / "latest").symlink_to(tmp_path / "foreign" / "latest")

    def linked_step(root):
        (root / "step-000009").symlink_to(foreign)
        (root / "latest").write_text("step-000009")

    return {f.__name__: f for f in (absolute, dotdot, linked_pointer, linked_step)}


@pytest.mark.parametrize("how", ["absolute", "dotdot", "linked_pointer", "linked_step"])
def test_a_latest_pointing_outside_the_run_is_refused(how, tmp_path, monkeypatch, capsys):
    from ragteam.trainers.learner.checkpoint import latest_checkpoint

    monkeypatch.setattr("ragteam.trainers.loop.make_backend", must_not_start)
    out = saved_run(tmp_path / "run")
    (out / "checkpoints").mkdir()
    outside_pointers(tmp_path)[how](out / "checkpoints")
    with pytest.raises(ValueError, match="latest"):
        latest_checkpoint(out / "checkpoints")
    assert ppo_graph.main(["--out", str(out), "--resume", "--no-progress"]) == 2
    assert str(out / "checkpoints" / "latest") in refused(capsys)
    assert sft_graph.main(["--traces", str(tmp_path), "--out", str(out), "--resume"]) == 2
    assert str(out / "checkpoints" / "latest") in refused(capsys, "sft_graph")


def test_a_latest_naming_its_own_checkpoint_still_resumes(tmp_path):
    from ragteam.trainers.learner.checkpoint import latest_checkpoint

    root = tmp_path / "checkpoints"
    (root / "step-000002").mkdir(parents=True)
    (root / "step-000002" / "trainer.json").write_text("{}")
    (root / "latest").write_text("step-000002\n")
    assert latest_checkpoint(root) == root / "step-000002"
    assert latest_checkpoint(tmp_path / "none") is None


# -- 5. a graph that gives the learner nothing stops before the first update ----------------------
RETRIEVAL_ONLY = textwrap.dedent("""
    from langgraph.graph import END, START, StateGraph
    from ragteam.nodes.workflow import WorkflowState, retriever

    def first_title(state):
        return {"answer": state["documents"][0].title if state.get("documents") else ""}

    builder = StateGraph(WorkflowState)
    builder.add_node("RA", retriever("RA"))
    builder.add_node("pick", first_title)
    builder.add_edge(START, "RA")
    builder.add_edge("RA", "pick")
    builder.add_edge("pick", END)
    graph = builder.compile()
""")


class ScriptedBackend:
    """The embedded backend's rollouts on the scripted policy, and a learner that must not run."""

    def __init__(self, config, frozen_roles, engine=None):
        from ragteam.graphs.methods import get_method
        from ragteam.nodes.context import RunContext
        from ragteam.nodes.policies.scripted import ScriptedPolicy
        from ragteam.nodes.team import Team
        from ragteam.stores.demo import demo_retriever
        from ragteam.trainers.rollout import run_settings

        self.config, self.graph = config, get_method(config.graph).training_graph()
        self.ctx = RunContext(Team(ScriptedPolicy({"AG": "<answer>yes</answer>"})), demo_retriever(),
                              run_settings(config))

    def start_rollouts(self, examples, tag):
        from ragteam.trainers.backends.embedded import DeferredRuns

        return DeferredRuns(examples, tag)

    def finish_rollouts(self, started):
        import asyncio

        from ragteam.trainers.rollout import collect

        rollouts, failed = asyncio.run(collect(self.graph, started.examples, self.ctx, 1, 2, started.tag))
        return rollouts, {"failed": failed}

    def learn(self, items, step):
        raise AssertionError("an update ran on a step with nothing to train")

    def resume(self, folder):
        return None

    sync = lr = save = export = close = lambda self, *args: 0.0


def test_a_graph_without_model_calls_stops_before_the_first_update(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("ragteam.trainers.loop.make_backend", ScriptedBackend)
    (tmp_path / "retrieval_only.py").write_text(RETRIEVAL_ONLY)
    graph = f"{tmp_path / 'retrieval_only.py'}:graph"
    out = tmp_path / "run"
    assert ppo_graph.main(["--graph", graph, "--out", str(out), "--steps", "2", "--questions-per-step", "2",
                           "--quiet"]) == 2
    err = refused(capsys)
    assert "retrieval_only.py:graph" in err and "made no model calls" in err
    assert not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text()


def test_calls_of_no_trained_role_stop_the_first_step_and_warn_later(tmp_path, monkeypatch, capsys):
    from ragteam.trainers.loop import NothingToTrain, Trainer

    monkeypatch.setattr("ragteam.trainers.loop.make_backend", ScriptedBackend)
    config = from_dict({"graph": "vanilla_rag", "out": str(tmp_path / "run"), "questions_per_step": 2,
                        "train_roles": ["QR"]})  # vanilla RAG calls AG only
    trainer = Trainer(config, progress=False)
    with pytest.raises(NothingToTrain, match=r"step 1: the 2 runs of graph 'vanilla_rag' made 2 model calls, "
                                             r"none trained \(roles AG; trained roles: QR\)"):
        trainer.train_step()
    trainer.step = 3  # a later step of a run that has trained: a warning, and the run goes on
    assert trainer.train_step()["trained_transitions"] == 0
    assert "warning: step 4: the 2 runs of graph 'vanilla_rag' made 2 model calls" in capsys.readouterr().err
    trainer.close()


def test_resuming_a_finished_run_says_so_and_loads_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("ragteam.trainers.loop.Trainer", must_not_start)
    out = saved_run(tmp_path / "run")
    step = out / "checkpoints" / "step-000002"
    step.mkdir(parents=True)
    (step / "trainer.json").write_text(json.dumps({"step": 2, "cursor": 16}))
    (out / "checkpoints" / "latest").write_text("step-000002")
    assert ppo_graph.main(["--out", str(out), "--resume", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "has finished its 2 steps" in err and "--steps above 2" in err


@pytest.mark.parametrize("flags, refused_flag", [(["--lr", "2e-5"], "--lr"), (["--min-f1", "0.9"], "--min-f1")])
def test_an_sft_resume_with_other_terms_is_refused_before_any_model_loads(flags, refused_flag, tmp_path, capsys):
    out = claim(tmp_path / "sft", TRAINING)
    step = out / "checkpoints" / "step-000001"
    step.mkdir(parents=True)
    saved = {"traces": [str(tmp_path)], "lr": 1e-5, "min_f1": 0.5, "epochs": 2}
    (step / "trainer.json").write_text(json.dumps({"step": 1, "cursor": 1, "args": saved}))
    (out / "checkpoints" / "latest").write_text("step-000001")
    assert sft_graph.main(["--traces", str(tmp_path), "--out", str(out), "--resume", *flags]) == 2
    assert f"started with {refused_flag}" in refused(capsys, "sft_graph")


def test_an_sft_resume_may_run_more_epochs(tmp_path):
    out = claim(tmp_path / "sft", TRAINING)
    step = out / "checkpoints" / "step-000001"
    step.mkdir(parents=True)
    saved = {"traces": [str(tmp_path)], "lr": 1e-5, "epochs": 2}
    (step / "trainer.json").write_text(json.dumps({"step": 1, "cursor": 1, "args": saved}))
    (out / "checkpoints" / "latest").write_text("step-000001")
    args = argparse.Namespace(traces=[str(tmp_path)], lr=1e-5, epochs=4, out=str(out), resume=True)
    sft_graph.check_resumed_args(out, args)  # no error: how long it runs is the resumer's to say


def test_resume_loads_the_saved_config_and_refuses_contradictions(tmp_path):
    from ragteam.trainers import ppo_graph
    from ragteam.trainers.config import from_dict

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



# -- 5. a latest whose step is gone is damage, not "no checkpoint yet" ------------------------------
def test_a_latest_naming_a_removed_step_refuses_and_names_the_step_it_could_use(tmp_path, monkeypatch, capsys):
    """``rm -rf OUT/checkpoints/step-000003`` once started the run over, emptying metrics.jsonl
    although step-000002 was complete; now it is refused in one line naming step-000002."""
    monkeypatch.setattr("ragteam.trainers.loop.Trainer", must_not_start)
    out = saved_run(tmp_path / "run")
    (out / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n')
    for step in (1, 2):
        folder = out / "checkpoints" / f"step-00000{step}"
        folder.mkdir(parents=True)
        (folder / "trainer.json").write_text(json.dumps({"step": step, "cursor": 4 * step}))
    (out / "checkpoints" / "latest").write_text("step-000003")
    assert ppo_graph.main(["--out", str(out), "--resume", "--no-progress"]) == 2
    err = refused(capsys)
    assert "'step-000003', which is not a complete checkpoint" in err and "step-000002" in err
    assert (out / "metrics.jsonl").read_text().count("\n") == 3  # nothing lost


def test_a_checkpoints_folder_that_is_a_link_is_refused_and_never_pruned(tmp_path, monkeypatch, capsys):
    """OUT/checkpoints linked to a user's folder: the run once pruned the user's step-000007 there
    and wrote latest into it. Refused before any model loads, and the saver refuses it too."""
    from ragteam.trainers.learner.checkpoint import save_checkpoint
    from tests.test_first_hour import FakeOptimizer

    monkeypatch.setattr("ragteam.trainers.loop.make_backend", must_not_start)
    mine = tmp_path / "mine"
    (mine / "step-000007").mkdir(parents=True)
    out = saved_run(tmp_path / "run")
    (out / "checkpoints").symlink_to(mine)
    assert ppo_graph.main(["--out", str(out), "--resume", "--no-progress"]) == 2
    assert "is a symbolic link" in refused(capsys)
    with pytest.raises(ValueError, match="is a symbolic link"):
        save_checkpoint(out / "checkpoints", 9, FakeOptimizer(), {"cursor": 1})
    assert sorted(p.name for p in mine.iterdir()) == ["step-000007"]
