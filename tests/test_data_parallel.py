"""N learner ranks (``trainers.learner.data_parallel``): the dealing of work, and 2 ranks over gloo
taking the same PPO step as one rank: with ZeRO-2 and ZeRO-3 each rank holding half the optimizer
state, and per-role adapters on plain AdamW each rank holding all of it."""

import json

import pytest
import torch

from ragteam.trainers.learner.data_parallel import Ranks


def test_dealing_gives_every_rank_as_many_micro_batches_and_each_item_to_exactly_one():
    for count in range(0, 8):
        work = list(range(count))
        for size in (1, 2, 3):
            dealt = [Ranks(rank, size).deal(work) for rank in range(size)]
            assert len({len(d) for d in dealt}) <= 1  # equal counts: ZeRO-3's collectives pair up
            real = sorted(item for d in dealt for item, is_real in d if is_real)
            assert real == work
            stand_ins = [item for d in dealt for item, is_real in d if not is_real]
            assert all(item == work[0] for item in stand_ins)  # a stand-in repeats real work


def _buffer():
    """A scored buffer of 14 calls in 4 runs of 2 questions, of varied lengths."""
    from tests.conftest import experience

    return [experience([10 + (7 * i + j) % 90 for j in range(5 + i % 5)],
                       [200 + (3 * i + j) % 50 for j in range(2 + i % 3)],
                       trajectory=f"run{i % 4}", group=f"q{i % 2}", role=("planner", "AG")[i % 2],
                       reward=float(i % 3) - 0.5)
            for i in range(14)]


# per-role adapters on the tiny model: each of the buffer's two roles trains its own
ADAPTERS = {"planner": {"roles": ["planner"], "r": 4}, "answerer": {"roles": ["AG"], "r": 4}}


def _rank_main(rank: int, size: int, port: int, model_dir: str, options: dict, out: str) -> None:
    """One learner rank: the same buffer, one PPO step (2 epochs, several micro-batches per
    mini-batch, a KL term on the frozen reference), then its figures to OUT/rank<r>.*.
    ``options``: the optimizer's (DeepSpeed and its ZeRO stage, or AdamW over per-role adapters)."""
    from ragteam.trainers.config import TrainConfig
    from ragteam.trainers.learner.data_parallel import init_learner_group
    from ragteam.trainers.learner.learner import Learner

    torch.set_num_threads(1)
    if size > 1:
        init_learner_group("127.0.0.1", port, rank, size)
    config = TrainConfig(graph="jade", model=model_dir, backend="ray" if size > 1 else "embedded",
                         ray={"learner_ranks": size}, lr=1e-3, head_lr=1e-3, seed=0, **options,
                         ppo={"epochs": 2, "minibatch_size": 7, "micro_batch_tokens": 24, "kl_coef": 0.05})
    # each rank's random state its own (LoRA's A is drawn at random): the first rank's as one
    # rank's, the others must take the first rank's draw
    torch.manual_seed(config.seed + rank)
    learner = Learner(config, model_dir, frozen_roles=[])
    items = _buffer()
    for e in items:  # behaviour log-probs: the initial model's own
        e.old_logprobs = learner.logprobs(e.prompt_ids, e.completion_ids, e.temperature, e.role)
    metrics = learner.learn(items, step=0)
    head = learner.optimizer.full_state_dict(learner.model.value_head)
    if config.adapters or config.lora:  # the adapters' weights: what this step trained
        weights = {n: p.detach().clone() for n, p in learner.model.lm.named_parameters() if "lora_" in n}
    else:
        weights = learner.weights()
    state = learner.optimizer.optimizer_state_numel()
    torch.save({**weights, **{f"value_head.{k}": v for k, v in head.items()}}, f"{out}/weights{rank}.pt")
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump({"metrics": metrics, "values": [e.value for e in items], "optimizer_state": state}, f)
    if size > 1:
        torch.distributed.destroy_process_group()


def _run(size: int, options: dict, model_dir: str, folder) -> tuple[list[dict], list[dict]]:
    """Each rank's report and weights after the step."""
    import torch.multiprocessing as mp

    from tests.conftest import free_port

    folder.mkdir()
    mp.start_processes(_rank_main, args=(size, free_port(), model_dir, options, str(folder)),
                       nprocs=size, start_method="spawn")
    reports = [json.loads((folder / f"rank{r}.json").read_text()) for r in range(size)]
    return reports, [torch.load(folder / f"weights{r}.pt", weights_only=True) for r in range(size)]


def _same_step(single: dict, reports: list[dict]) -> None:
    """Every rank saw every value and the whole step's statistics of the one-rank step."""
    for report in reports:
        assert report["values"] == pytest.approx(single["values"], abs=1e-6)
        for key in ("policy_loss", "kl_ref", "clip_frac", "update_tokens", "grad_norm"):
            assert report["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-5, abs=1e-6), key


@pytest.mark.distributed
def test_two_learner_ranks_with_zero2_and_zero3_take_the_step_one_rank_takes(tiny_model_dir, tmp_path):
    """Tolerances: the ranks sum the same per-call gradients in another order (float32), so the
    statistics agree to float32 rounding (1e-5 relative); the weights after 4 Adam steps of lr
    1e-3 agree to 1e-5 (measured: 9e-7 with ZeRO-3, 8e-8 with ZeRO-2). Adam divides each
    gradient by its own running scale, so a rounding difference in a near-zero gradient can move
    that element by up to ~lr per step: a tighter bound would test rounding, not the method."""
    from transformers import AutoModelForCausalLM

    [single], [single_weights] = _run(1, {"optimizer": "deepspeed", "zero_stage": 2}, tiny_model_dir, tmp_path / "one")
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert any(not torch.allclose(initial[n], single_weights[n], atol=1e-5) for n in initial)  # it learned
    for stage in (2, 3):
        reports, [weights, _] = _run(2, {"optimizer": "deepspeed", "zero_stage": stage}, tiny_model_dir,
                                     tmp_path / f"two-zero{stage}")
        _same_step(single, reports)
        assert weights.keys() == single_weights.keys()
        for name, value in single_weights.items():
            assert torch.allclose(weights[name], value, atol=1e-5), (stage, name, (weights[name] - value).abs().max())
        half = [report["optimizer_state"] / single["optimizer_state"] for report in reports]
        assert all(0.45 <= share <= 0.55 for share in half), (stage, half)  # ZeRO: each rank half


@pytest.mark.distributed
@pytest.mark.parametrize("adapters", [{"adapters": ADAPTERS}, {"lora": {"r": 4}}], ids=["per-role", "lora"])
def test_two_learner_ranks_train_adapters_on_adamw_as_one_rank_does(adapters, tiny_model_dir, tmp_path):
    """Per-role adapters (or one LoRA adapter) on plain AdamW over two ranks (data parallel: each
    rank holds every adapter and its optimizer state; gradients averaged each step): the step one
    rank takes. The adapters start as rank 0 draws them (LoRA's A is random) and each learns.
    Tolerances as above: the same gradients summed in another order."""
    options = {"optimizer": "torch", **adapters}
    [single], [single_weights] = _run(1, options, tiny_model_dir, tmp_path / "one")
    reports, ranks_weights = _run(2, options, tiny_model_dir, tmp_path / "two")
    _same_step(single, reports)
    assert reports[0]["optimizer_state"] == reports[1]["optimizer_state"] == single["optimizer_state"] > 0
    for adapter in adapters.get("adapters", ["default"]):  # each adapter learned: B starts at 0 and moved
        moved = [n for n, w in single_weights.items() if f"lora_B.{adapter}." in n and w.abs().max() > 0]
        assert moved, adapter
    for weights in ranks_weights:  # each rank holds the whole adapters: all of them the one rank's
        assert weights.keys() == single_weights.keys()
        for name, value in single_weights.items():
            assert torch.allclose(weights[name], value, atol=1e-5), (name, (weights[name] - value).abs().max())


def test_a_checkpoint_resumes_only_on_the_rank_count_that_wrote_it(tmp_path):
    """ZeRO's optimizer shards are cut for one world size: another is refused before loading."""
    from ragteam.trainers.learner.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
    from ragteam.trainers.learner.optimizers import make_optimizer

    optimizer = make_optimizer("torch", torch.nn.Linear(2, 2), lr=1e-3)
    save_checkpoint(tmp_path, 1, optimizer, {"cursor": 0})
    assert load_checkpoint(latest_checkpoint(tmp_path), optimizer)["learner_ranks"] == 1

    class TwoRanks:
        ranks = Ranks(0, 2)

    with pytest.raises(ValueError, match="written by 1 learner rank"):
        load_checkpoint(latest_checkpoint(tmp_path), TwoRanks())
