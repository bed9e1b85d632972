"""Training throughput: ragteam's PPO update vs a bare forward + backward + optimizer step.

Both sides train SmolLM2-135M-Instruct (float32, CPU) on the same transitions — recorded from
real JADE rollouts of the offline model — in the same micro-batches with one optimizer step per
mini-batch. The bare baseline is the plainest loop a person would write: the Hugging Face model
with full logits, cross-entropy on the completion tokens, ``backward``, ``AdamW.step``. ragteam's
side is ``trainers.learner.ppo_update.update`` (log-probs on completion positions only, value head, clipped
PPO + value losses) on the torch backend and on the DeepSpeed backend (ZeRO-2, CPU Adam).
Figure: trained tokens per second; target ragteam / bare >= 0.8. Both sides compute every call's
prompt in full here (``share_prompts=False``): this measures the framework's overhead, not the
shared-prompt saving (``benchmarks/bench_shared_prompts.py`` measures that).

    python benchmarks/bench_train.py [--questions 6]
"""

from __future__ import annotations

import argparse
import copy
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from jade_buffer import record_jade_buffer
from ragteam.trainers.algorithms.advantages import assign_advantages
from ragteam.trainers.algorithms.ppo import micro_batches
from ragteam.trainers.algorithms.settings import PPOSettings
from ragteam.trainers.learner.ppo_update import fill_values, update
from ragteam.trainers.learner.model import PolicyValueModel, make_batch
from ragteam.trainers.learner.optimizers import make_optimizer


def bare_loop(lm, items, settings: PPOSettings, pad_id: int) -> tuple[int, float]:
    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-6)
    lm.train()
    tokens, started = 0, time.perf_counter()
    for start in range(0, len(items), settings.minibatch_size):
        minibatch = items[start:start + settings.minibatch_size]
        for group in micro_batches(minibatch, settings.micro_batch_tokens, share_prompts=False):
            batch = make_batch([e.prompt_ids for e in group], [e.completion_ids for e in group],
                               [1.0] * len(group), pad_id)
            labels = batch.input_ids.clone()
            for row, e in enumerate(group):  # loss on completion tokens only
                labels[row, :len(e.prompt_ids)] = -100
                labels[row, e.n_tokens:] = -100
            loss = lm(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=labels).loss
            (loss * len(group) / len(minibatch)).backward()
            tokens += int(batch.attention_mask.sum())
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return tokens, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=6, help="bundled questions whose JADE runs make the buffer (default 6)")
    n_questions = parser.parse_args().questions
    torch.manual_seed(0)
    lm, tokenizer, items = record_jade_buffer(n_questions)
    settings = PPOSettings(minibatch_size=8, epochs=1, share_prompts=False)
    pad = tokenizer.pad_token_id
    print(f"{len(items)} transitions from {n_questions} JADE rollouts, "
          f"{sum(e.n_tokens for e in items)} tokens ({sum(len(e.completion_ids) for e in items)} completion)")

    bare_tokens, bare_s = bare_loop(copy.deepcopy(lm), items, settings, pad)
    rows = [("bare HF fwd+bwd+AdamW", bare_tokens, bare_s)]
    for optimizer in ("torch", "deepspeed"):
        model = PolicyValueModel(copy.deepcopy(lm))
        engine = make_optimizer(optimizer, model, lr=1e-6, head_lr=1e-4, zero_stage=2)
        work = copy.deepcopy(items)
        fill_values(engine.module, work, pad, settings.micro_batch_tokens, share_prompts=False)
        assign_advantages(work, settings)
        stats = update(engine, work, settings, pad, shuffle_seed=0)
        rows.append((f"ragteam PPO update ({optimizer})", stats["update_tokens"], stats["update_s"]))
    print(f"\n{'':32} {'tokens':>8} {'seconds':>8} {'tokens/s':>9}")
    for name, tokens, seconds in rows:
        print(f"{name:32} {tokens:8d} {seconds:8.1f} {tokens / seconds:9.1f}")
    base = bare_tokens / bare_s
    for name, tokens, seconds in rows[1:]:
        print(f"{name} / bare: {tokens / seconds / base:.2f}  (target >= 0.8)")


if __name__ == "__main__":
    main()
