"""Asynchronous rollouts (``async.max_staleness``) on the embedded backend and a tiny random
model: k = 0 is the synchronous step exactly; with k = 1 the next step's runs start before the
update and sample from a snapshot that each sync refreshes; groups come back whole, no run is
dropped, and a step trains on the questions a synchronous run would."""

import json

import pytest
import torch

from ragteam.trainers.config import from_dict
from ragteam.trainers.loop import Trainer, batch_at
from ragteam.trainers.rollout import score_rollouts

RUN = {"graph": "vanilla_rag", "questions_per_step": 2, "samples_per_question": 2, "concurrency": 4,
       "optimizer": "torch", "export_hf": False, "lr": 1e-2, "ppo": {"advantage": "grpo", "epochs": 1}}


def config(model_dir, out, **changes):
    return from_dict({**RUN, "model": model_dir, "out": str(out), **changes})


class CallOrder:
    """Records the order of the backend's halves (start, finish, learn, sync) by step tag."""

    def __init__(self, backend):
        self.events = []
        for name in ("start_rollouts", "finish_rollouts", "learn", "sync"):
            setattr(backend, name, self._spy(name, getattr(backend, name)))

    def _spy(self, name, method):
        def call(*args, **kwargs):
            tag = kwargs.get("tag", "")
            self.events.append(f"{name}({tag})" if tag else name)
            return method(*args, **kwargs)
        return call


def trained_items(backend):
    """The experience handed to each ``learn``, in order."""
    seen = []
    learn = backend.learn

    def spy(items, step):
        seen.append(items)
        return learn(items, step)
    backend.learn = spy
    return seen


def test_k0_is_the_synchronous_step_the_halves_called_one_after_another(tiny_model_dir, tmp_path):
    """Same seed: the loop at k = 0 and the backend's halves called by hand (rollouts, score,
    learn, sync) give the same experience, token for token, and the same weights; nothing of a
    step starts before the previous sync."""
    # one run at a time: the decoding batches, and so the sampled tokens, do not hang on timing
    looped = Trainer(config(tiny_model_dir, tmp_path / "loop", steps=2, concurrency=1), progress=False)
    order = CallOrder(looped.backend)
    looped_items = trained_items(looped.backend)
    for _ in range(2):
        metrics = looped.train_step()
        assert metrics["staleness"] == 0
    assert order.events == ["start_rollouts(s1)", "finish_rollouts", "learn", "sync",
                            "start_rollouts(s2)", "finish_rollouts", "learn", "sync"]

    by_hand = Trainer(config(tiny_model_dir, tmp_path / "hand", steps=2, concurrency=1), progress=False)
    hand_items = []
    for step in range(2):
        chosen = [by_hand.examples[i] for i in batch_at(len(by_hand.examples), 2 * step, 2, 0)]
        rollouts, _ = by_hand.backend.rollouts(chosen, tag=f"s{step + 1}")
        items, _, _ = score_rollouts(rollouts, by_hand.reward, by_hand.train_roles, 1.0)
        hand_items.append(items)
        by_hand.backend.learn(items, step)
        by_hand.backend.sync()
    assert [[(e.prompt_ids, e.completion_ids, e.reward) for e in step] for step in looped_items] == \
        [[(e.prompt_ids, e.completion_ids, e.reward) for e in step] for step in hand_items]
    ours, theirs = looped.backend.learner.model.state_dict(), by_hand.backend.learner.model.state_dict()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)
    assert looped.backend.rollout_policy.model is looped.backend.learner.model.lm  # no snapshot
    looped.close()
    by_hand.close()


def test_k1_starts_the_next_steps_runs_before_the_update_on_a_synced_snapshot(tiny_model_dir, tmp_path):
    trainer = Trainer(config(tiny_model_dir, tmp_path / "run", steps=3, **{"async": {"max_staleness": 1}}),
                      progress=False)
    backend = trainer.backend
    assert backend.rollout_policy.model is not backend.learner.model.lm  # sampling beside the update
    order = CallOrder(backend)
    items = trained_items(backend)
    history = trainer.train()
    # the first start copies the weights into the snapshot; step 2's runs start before step 1's
    # update, step 3's right after the sync that follows it
    assert order.events[:5] == ["start_rollouts(s1)", "sync", "start_rollouts(s2)", "finish_rollouts", "learn"]
    after_update = order.events.index("sync", order.events.index("learn"))
    assert order.events[after_update + 1] == "start_rollouts(s3)"
    assert [m["staleness"] for m in history] == [0, 1, 1]
    # every call was sampled under weights at most one update old (versions: optimizer steps)
    versions = [[e.weight_version for e in step] for step in items]
    assert set(versions[0]) == {0} and set(versions[1]) <= {0, 1} and set(versions[2]) <= {1, 2}
    assert 0 in versions[1]  # step 2's runs began on the initial weights
    # the sync after each update made the snapshot the learner's weights again
    learner, snapshot = backend.learner.model.lm.state_dict(), backend.rollout_policy.model.state_dict()
    assert all(torch.equal(learner[name], snapshot[name]) for name in learner)
    assert backend.rollout_policy.weight_version == backend.learner.version == 3
    trainer.close()


def test_groups_come_back_whole_on_the_questions_a_synchronous_run_trains(tiny_model_dir, tmp_path):
    """Each step's record (OUT/rollouts) holds both runs of each of its questions, and the
    questions are the synchronous run's, step by step."""
    steps = {}
    for k in (0, 2):
        out = tmp_path / f"k{k}"
        trainer = Trainer(config(tiny_model_dir, out, steps=3, **{"async": {"max_staleness": k}}), progress=False)
        trainer.train()
        trainer.close()
        steps[k] = []
        for step in (1, 2, 3):
            records = [json.loads(line) for line in (out / "rollouts" / f"step-{step:06d}.jsonl").read_text().splitlines()]
            ids = sorted(r["question_id"] for r in records)
            assert ids == sorted(list(set(ids)) * 2)  # two runs of each question: no run dropped or split off
            steps[k].append(ids)
    assert steps[2] == steps[0]


def test_closing_mid_run_stops_the_runs_started_ahead(tiny_model_dir, tmp_path):
    trainer = Trainer(config(tiny_model_dir, tmp_path / "run", steps=4, **{"async": {"max_staleness": 2}}),
                      progress=False)
    trainer.train_step()
    assert sorted(trainer.in_flight) == [1, 2, 3]  # the next step and the two ahead of it, started
    runs = [started for _, _, started in trainer.in_flight.values()]
    trainer.close()
    assert not trainer.in_flight and all(r.done() for r in runs)
    assert not trainer.backend.background.thread.is_alive()


def test_a_sleeping_engine_is_refused_for_asynchronous_rollouts():
    with pytest.raises(ValueError, match="async.max_staleness: asynchronous rollouts keep the engine generating"):
        from_dict({"sampler": "vllm", "vllm": {"enable_sleep_mode": True}, "async": {"max_staleness": 1}})
    with pytest.raises(ValueError, match="max_staleness"):
        from_dict({"async": {"max_staleness": -1}})


def test_the_flag_and_the_yaml_key_set_it(tmp_path):
    from ragteam.trainers.config import load_config
    from ragteam.trainers.ppo_graph import config_from_args, parser

    assert config_from_args(parser().parse_args(["--max-staleness", "2"])).async_.max_staleness == 2
    (tmp_path / "run.yaml").write_text("async:\n  max_staleness: 3\n")
    config = load_config(tmp_path / "run.yaml", {})
    assert config.async_.max_staleness == 3 and config.to_dict()["async"] == {"max_staleness": 3}
    assert from_dict(config.to_dict()).async_.max_staleness == 3  # what run_config.json restores


def test_a_resumed_run_may_change_its_staleness_bound(tmp_path):
    """How far rollouts run ahead is a scheduling choice, like concurrency: ``--resume`` takes it."""
    from ragteam.trainers.ppo_graph import config_from_args, parser

    out = tmp_path / "run"
    out.mkdir()
    (out / "run_config.json").write_text(json.dumps(from_dict({"out": str(out), "lr": 1e-3}).to_dict()))
    config = config_from_args(parser().parse_args(["--out", str(out), "--resume", "--max-staleness", "2"]))
    assert config.async_.max_staleness == 2 and config.lr == 1e-3


def test_the_snapshot_takes_weights_changed_before_the_first_step(tiny_model_dir, tmp_path):
    """A warm start (or anything else) may change the learner between the backend's start and
    the first rollouts: the snapshot is copied again when they start."""
    trainer = Trainer(config(tiny_model_dir, tmp_path / "run", steps=2, **{"async": {"max_staleness": 1}}),
                      progress=False)
    with torch.no_grad():
        next(trainer.backend.learner.model.lm.parameters()).add_(1.0)
    trainer.admit()
    learner = trainer.backend.learner.model.lm.state_dict()
    snapshot = trainer.backend.rollout_policy.model.state_dict()
    assert all(torch.equal(learner[name], snapshot[name]) for name in learner)
    trainer.close()


def test_a_given_engine_samples_beside_the_update(tiny_model_dir, tmp_path):
    """The embedded backend's engine path at k = 1, through the stand-in engine the benchmark
    uses (``nodes.policies.scripted_engine``): its calls record the version each sync gave it."""
    from transformers import AutoTokenizer

    from ragteam.nodes.policies.scripted_engine import ScriptedEngine

    engine = ScriptedEngine(AutoTokenizer.from_pretrained(tiny_model_dir), tiny_model_dir)
    trainer = Trainer(config(tiny_model_dir, tmp_path / "run", steps=3, sampler="vllm", weight_sync="blob",
                             **{"async": {"max_staleness": 1}}), progress=False, engines=[engine])
    items = trained_items(trainer.backend)
    history = trainer.train()
    assert [m["staleness"] for m in history] == [0, 1, 1]
    assert all(m["trained_transitions"] > 0 for m in history)
    assert {e.weight_version for e in items[0]} == {0} and {e.weight_version for e in items[2]} <= {1, 2}
    assert engine.weight_version == trainer.backend.learner.version == 3
    trainer.close()
