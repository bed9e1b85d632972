"""The PPO update on the learner's model: a unified buffer of mixed-role transitions (JADE
Alg. 2, phase 2).

``fill_values`` reads each experience's rollout-time value (and reference log-probs when a KL
term is on); the advantages come from ``trainers.algorithms.advantages``; ``update`` runs several
epochs of shuffled mini-batches, each split into micro-batches that fit a token budget
(``trainers.algorithms.ppo``, which also holds the loss). Log-probs are recomputed on the exact
recorded ids.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ragteam.trainers.algorithms.ppo import micro_batches, minibatches, ppo_loss, rollout_gap
from ragteam.trainers.algorithms.settings import PPOSettings
from ragteam.trainers.experience import Experience
from ragteam.trainers.learner import attention as gpu_attention
from ragteam.trainers.learner.batches import batch_for
from ragteam.trainers.learner.data_parallel import Ranks
from ragteam.trainers.learner.model import PolicyValueModel


def forward_items(model: PolicyValueModel, items: Sequence[Experience], pad_id: int,
                  share_prompts: bool = True):
    """(batch, log-probs [B, C], values [B]) of ``items`` on the model's device; shared prompts
    computed once (``trainers.learner.batches``) unless ``share_prompts`` is off."""
    batch = batch_for([e.prompt_ids for e in items], [e.completion_ids for e in items],
                      [e.temperature for e in items], pad_id, share_prompts,
                      block=gpu_attention.packed_block(model.lm)).to(next(model.parameters()).device)
    logprobs, values = model(batch)
    return batch, logprobs, values


def adapter_micro_batches(items: Sequence[Experience], token_budget: int, share_prompts: bool,
                          adapters=None) -> list[tuple[str | None, list[Experience]]]:
    """``micro_batches`` as (adapter, calls) pairs: with per-role adapters
    (``trainers.learner.adapters.RoleAdapters``) the calls are split by adapter first, so each
    micro-batch runs under one adapter; without, every adapter is None."""
    parts = adapters.split(items) if adapters is not None else {None: list(items)}
    return [(name, group) for name, part in parts.items()
            for group in micro_batches(part, token_budget, share_prompts)]


def active_adapter(model: PolicyValueModel, adapters, name: str | None):
    """The context in which ``model``'s forwards run ``name``'s adapter (none to switch: a no-op)."""
    return nullcontext() if adapters is None else adapters.active(model.lm, name)


@torch.no_grad()
def fill_values(model: PolicyValueModel, items: Sequence[Experience], pad_id: int,
                token_budget: int, reference=None, share_prompts: bool = True,
                ranks: Ranks = Ranks(), adapters=None, learner_old: bool = False,
                version: int | None = None) -> dict[str, float]:
    """Rollout-time values from the critic and, with a reference model, its log-probs; with
    several learner ranks each computes its dealt micro-batches and all share the results.
    Returns the rollout-vs-learner gap of the sampled calls (``rollout_gap``): this forward is
    the learner's policy before the step's update, the one the engines should have sampled with.

    A written call (``Transition.written``: a reply training chose, not sampled) has no
    behaviour log-probs; the same forward gives it π_old's, so its ratio starts at 1 and its
    update is the plain policy gradient of that reply, clipped like any other. With per-role
    ``adapters`` each micro-batch runs under its roles' adapter (the reference: every adapter off).
    With ``learner_old`` (``ppo.behaviour_correction: tis``) a sampled call's π_old becomes this
    forward's too, its behaviour log-probs kept as ``behaviour_logprobs`` for the loss's weights."""
    model.eval()
    position = {id(e): i for i, e in enumerate(items)}
    mine: dict[int, tuple[float, list[float] | None, list[float]]] = {}
    for (name, group), real in ranks.deal(adapter_micro_batches(items, token_budget, share_prompts, adapters)):
        with active_adapter(model, adapters, name):
            _, logprobs, values = forward_items(model, group, pad_id, share_prompts)
        own = [row[:len(e.completion_ids)] for e, row in zip(group, logprobs.tolist())]
        rows = [None] * len(group)
        if reference is not None:
            with reference() as ref_model:  # its own weights, or every adapter off
                _, ref_logprobs, _ = forward_items(ref_model, group, pad_id, share_prompts)
            rows = [row[:len(e.completion_ids)] for e, row in zip(group, ref_logprobs.tolist())]
        if real:
            mine.update({position[id(e)]: (v, row, o) for e, v, row, o in zip(group, values.tolist(), rows, own)})
    learner_rows: dict[int, list[float]] = {}
    for computed in ranks.gather(mine):
        for i, (value, row, own) in computed.items():
            items[i].value = value
            if row is not None:
                items[i].ref_logprobs = row
            if items[i].old_logprobs:
                learner_rows[i] = own
                if learner_old:
                    items[i].behaviour_logprobs, items[i].old_logprobs = items[i].old_logprobs, own
            else:
                items[i].old_logprobs = own
    sampled = sorted(learner_rows)
    behaviour = [items[i].behaviour_logprobs or items[i].old_logprobs for i in sampled]
    return rollout_gap([items[i] for i in sampled], [learner_rows[i] for i in sampled], behaviour, version)


@dataclass
class PassStats:
    """What one pass over the buffer trained: ``tokens`` counted as the unshared computation
    would (every call's prompt and completion), ``computed_tokens`` actually run through the
    model, and the grad norm of each optimizer step."""

    tokens: int = 0
    computed_tokens: int = 0
    grad_norms: list[float] = field(default_factory=list)
    adapter_grad_norms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


def optimize_pass(optimizer, items: Sequence[Experience], pad_id: int, minibatch_size: int,
                  token_budget: int, rng: random.Random, loss_of,
                  aggregation: str = "per_call", share_prompts: bool = True,
                  stand_in_loss=None, adapters=None, skip: int = 0, after_step=None) -> PassStats:
    """One shuffled pass: mini-batches (one optimizer step each, ``minibatches``) split into
    micro-batches under the token budget. ``loss_of(group, batch_outputs)`` returns the
    micro-batch's mean loss; it is weighted by the group's share of the mini-batch — its calls
    (``per_call``) or its completion tokens (``per_token``) — so the accumulated gradient is the
    mini-batch's mean. With several learner ranks (``optimizer.ranks``) each runs its dealt
    micro-batches, stand-ins weighted 0 through ``stand_in_loss`` (which records nothing;
    default ``loss_of``), and the weights are scaled by the rank count (DeepSpeed averages
    gradients over ranks; ``trainers.learner.data_parallel``). With per-role ``adapters`` a
    mini-batch's micro-batches each run under their roles' adapter, one step updates them all,
    and each adapter's gradient norm is recorded before the step clips. A pass resumed part-way
    leaves out its first ``skip`` mini-batches (the shuffle is the same: ``rng`` is drawn as
    before); ``after_step(n, total)`` is called after its ``n``-th of ``total`` optimizer steps
    (to checkpoint)."""
    ranks: Ranks = optimizer.ranks
    stats = PassStats()
    batches = minibatches(items, minibatch_size, rng)
    for index, minibatch in enumerate(batches):
        if index < skip:
            continue
        dealt = ranks.deal(adapter_micro_batches(minibatch, token_budget, share_prompts, adapters))
        size = (sum(len(e.completion_ids) for e in minibatch) if aggregation == "per_token"
                else len(minibatch))
        for n, ((name, group), real) in enumerate(dealt):
            share = (sum(len(e.completion_ids) for e in group) if aggregation == "per_token"
                     else len(group)) if real else 0
            # the backward inside too: gradient checkpointing reruns the forward there
            with active_adapter(optimizer.module, adapters, name):
                outputs = forward_items(optimizer.forward_module, group, pad_id, share_prompts)
                loss = (loss_of if real else stand_in_loss or loss_of)(group, outputs)
                optimizer.accumulate(loss * share * ranks.size / size, boundary=n == len(dealt) - 1)
            if real:
                stats.tokens += sum(e.n_tokens for e in group)
                stats.computed_tokens += outputs[0].real_tokens
        if adapters is not None:
            for name, norm in adapters.grad_norms(optimizer.module).items():
                stats.adapter_grad_norms[name].append(norm)
        stats.grad_norms.append(optimizer.step())
        if after_step is not None:
            after_step(index + 1, len(batches))
    return stats


def update(optimizer, items: Sequence, settings: PPOSettings, pad_id: int, shuffle_seed: int,
           loss=ppo_loss, adapters=None) -> dict[str, float]:
    """Epochs × shuffled mini-batches of PPO on the shared model; returns mean statistics.
    ``loss(settings, stats)`` makes the micro-batch loss (another library's losses plug in here;
    its items need only ``prompt_ids``, ``completion_ids``, ``temperature`` and ``n_tokens``).
    With per-role ``adapters`` each adapter's statistics are also reported on their own
    (``adapter/<name>/…``, ``adapter_metrics``)."""
    model: PolicyValueModel = optimizer.module
    model.train()
    stats: dict[str, list[float]] = defaultdict(list)
    per_adapter = {name: defaultdict(list) for name in adapters.names} if adapters is not None else {}
    rng = random.Random(shuffle_seed)
    loss_of = loss(settings, stats) if adapters is None else _loss_by_adapter(loss, settings, adapters, per_adapter)
    stand_in = loss(settings, defaultdict(list))
    tokens, computed, started = 0, 0, time.perf_counter()
    for _ in range(settings.epochs):
        done = optimize_pass(optimizer, items, pad_id, settings.minibatch_size, settings.micro_batch_tokens,
                             rng, loss_of, settings.loss_aggregation, settings.share_prompts, stand_in,
                             adapters)
        tokens, computed = tokens + done.tokens, computed + done.computed_tokens
        stats["grad_norm"] += done.grad_norms  # one global norm per step, the same on every rank
        for name, norms in done.adapter_grad_norms.items():
            per_adapter[name]["grad_norm"] += norms
    for part in per_adapter.values():  # the whole step's statistics are every adapter's together
        for key, values in part.items():
            if key not in ("grad_norm", "loss"):
                stats[key] += values
    elapsed = time.perf_counter() - started
    model.eval()
    ranks: Ranks = optimizer.ranks
    if ranks.size > 1:  # every rank's micro-batch statistics and token counts
        gathered = ranks.gather(({k: v for k, v in stats.items() if k != "grad_norm"}, tokens, computed))
        norms = stats["grad_norm"]
        stats = defaultdict(list, grad_norm=norms)
        for part, _, _ in gathered:
            for k, v in part.items():
                stats[k] += v
        tokens, computed = sum(g[1] for g in gathered), sum(g[2] for g in gathered)
    out = {k: sum(v) / len(v) for k, v in stats.items() if v}
    # tokens/s counts every call's tokens, shared or not: a faster forward shows as a higher rate
    out.update(update_tokens=tokens, update_computed_tokens=computed, update_s=elapsed,
               tokens_per_s=tokens / max(elapsed, 1e-9))
    out.update(adapter_metrics(per_adapter, items, adapters))
    return out


def _loss_by_adapter(loss, settings: PPOSettings, adapters, per_adapter: dict):
    """A micro-batch loss that records its statistics under its calls' adapter (a micro-batch
    holds one adapter's calls, ``adapter_micro_batches``), its total loss included."""
    losses = {name: loss(settings, part) for name, part in per_adapter.items()}

    def loss_of(group, outputs):
        name = adapters.adapter_of(group[0].role)
        value = losses[name](group, outputs)
        per_adapter[name]["loss"].append(value.item())
        return value

    return loss_of


ADAPTER_METRICS = {"loss": "loss", "kl_ref": "kl", "clip_frac": "clip_frac", "grad_norm": "grad_norm"}


def adapter_metrics(per_adapter: dict[str, dict[str, list[float]]], items: Sequence, adapters) -> dict:
    """``adapter/<name>/{loss,kl,clip_frac,grad_norm,calls}``: each adapter's mean micro-batch
    loss, reference KL (when in the loss), clip fraction and pre-clipping grad norm over the
    step, and its calls in the buffer."""
    if adapters is None:
        return {}
    calls = {name: len(part) for name, part in adapters.split(items).items()}
    out = {}
    for name, part in per_adapter.items():
        out[f"adapter/{name}/calls"] = calls.get(name, 0)
        for key, shown in ADAPTER_METRICS.items():
            if part.get(key):
                out[f"adapter/{name}/{shown}"] = sum(part[key]) / len(part[key])
    return out
