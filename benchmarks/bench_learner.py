"""ragteam's PPO update against a bare training loop on the same model and token count, in one
run, on any device: how much of the hardware's training speed the learner keeps.

- learner: ``trainers.learner.learner.Learner`` (the model as the trainer loads it: on CUDA the
  FlexAttention / causal-flash path and, if installed, Liger kernels) running ``update`` on a
  GRPO-shaped buffer: ``--groups`` questions × ``--samples`` calls sharing one planner prompt,
  plus one unshared answerer call per sample; once with shared prompts computed once (the
  default layout), once with every call padded.
- bare loop: the same weights as a plain ``AutoModelForCausalLM`` (SDPA, causal, no mask):
  rows of the buffer's mean call length, cross-entropy on every position, backward, AdamW, as
  many optimizer steps as the learner takes, over the buffer's token count.

Trained tokens count every call's prompt and completion (what the bare loop trains); computed
tokens are what the learner actually ran (each shared prompt once, no padding). MFU (CUDA
only) counts 6 × parameters per token (the LM head only where it runs; attention excluded)
against ``--peak-tflops`` (default: by GPU name). Peak memory: CUDA's allocator peak, or on a
CPU the resident set above the level before each phase.

    python benchmarks/bench_learner.py                       # a tiny random Llama (SmolLM2's tokenizer)
    python benchmarks/bench_learner.py --model PATH --device cuda --groups 8 --samples 8
    python benchmarks/bench_learner.py --profile 12          # and where each phase spends its time

Last line: ``learner vs bare loop: X`` (shared layout, trained tokens/s ÷ the bare loop's).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}  # bf16 dense


def tiny_model(folder: Path, layers: int, hidden: int) -> str:
    """A random Llama at reduced size with the offline model's tokenizer and config family."""
    from random_model import build

    from ragteam.nodes.policies.offline_model import ensure_offline_model

    heads = max(hidden // 64, 2)
    build(folder, ensure_offline_model(),
          {"num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": hidden * 8 // 3,
           "num_attention_heads": heads, "num_key_value_heads": max(heads // 3, 1) if heads % 3 == 0 else 1,
           "head_dim": hidden // heads}, torch.float32)
    return str(folder)


def grpo_buffer(groups: int, samples: int, prompt: int, answer_prompt: int, completion: int, vocab: int, seed: int = 0):
    """Per question: ``samples`` planner calls sharing one prompt, and one answerer call per
    sample on a prompt of its own (its retrieved passages differ): the shape of a JADE GRPO step."""
    from ragteam.trainers.experience import Experience

    rng = random.Random(seed)
    ids = lambda n: [rng.randrange(100, vocab) for _ in range(n)]  # noqa: E731
    items = []
    for g in range(groups):
        shared = ids(prompt)
        for s in range(samples):
            for role, prompt_ids in (("planner", shared), ("AG", ids(answer_prompt))):
                n = max(1, completion + rng.randrange(-completion // 2, completion // 2 + 1))
                items.append(Experience(trajectory=f"q{g}s{s}", group=f"q{g}", role=role, prompt_ids=list(prompt_ids),
                                        completion_ids=ids(n), old_logprobs=[], temperature=1.0,
                                        reward=float(rng.random() < 0.5)))
    return items


class PeakMemory:
    """Peak memory of a phase: CUDA's allocator peak, else resident set above the start, sampled."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = 0
        else:
            _return_freed_memory()
            self.base = self.peak = self._rss()
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()
        return self

    def _watch(self):
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self._rss())

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self._rss())

    @property
    def mib(self) -> float:
        return (self.peak - self.base) / 2 ** 20


def _return_freed_memory() -> None:
    """Hand memory freed by an earlier phase back to the OS, so this phase's resident-set peak
    is not hidden by pages the allocator kept."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def profiled(device: torch.device, label: str, top: int):
    """Print where a pass spent its time: the ``top`` operators by self device time (CUDA) or
    self CPU time, and the share of the wall time the GPU was busy."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    started = time.perf_counter()
    with profile(activities=activities) as prof:
        yield
    wall = time.perf_counter() - started
    events = prof.key_averages()
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    busy = None
    if device.type == "cuda":  # kernels only: an operator's device time repeats its kernels'
        busy = sum(e.self_device_time_total for e in events if e.device_type == DeviceType.CUDA) / 1e6
    print(f"--- profile of {label}: {wall:.2f} s wall under the profiler"
          + (f", device busy {busy:.2f} s ({busy / wall:.0%})" if busy is not None else ""))
    print(events.table(sort_by=key, row_limit=top, max_name_column_width=60))


def learner_phase(path: str, items, args, share: bool) -> dict:
    """Warm-up pass, then one timed PPO pass of ragteam's learner (values filled beforehand)."""
    import copy

    from ragteam.trainers.learner.ppo_update import update
    from ragteam.trainers.config import PPOSettings, TrainConfig
    from ragteam.trainers.learner.learner import Learner

    settings = PPOSettings(advantage="grpo", epochs=1, minibatch_size=args.minibatch,
                           micro_batch_tokens=args.micro_batch_tokens, share_prompts=share)
    config = TrainConfig(model=path, device=args.device, bf16=args.bf16, optimizer="torch", lr=1e-6, ppo=settings,
                         samples_per_question=max(args.samples, 2))
    learner = Learner(config, path, frozen_roles=())
    work = copy.deepcopy(items)
    learner.prepare(work)  # old log-probs, values, GRPO advantages
    device = next(learner.model.parameters()).device
    # warm up on the timed pass's own mini-batches: on CUDA each new kind of micro-batch (with or
    # without grad, one row or several) compiles the attention kernels once, which a long run
    # pays at its first step; warmed up on another shuffle, an H200 run logged compiles late in
    # the shared phase and measured it at 0.20x the bare loop
    for _ in range(args.warmup):
        update(learner.optimizer, work, settings, learner.pad_id, shuffle_seed=0)
    with PeakMemory(device) as memory:
        sync(device)
        started = time.perf_counter()
        stats = update(learner.optimizer, work, settings, learner.pad_id, shuffle_seed=0)
        sync(device)
        seconds = time.perf_counter() - started
    if args.profile:  # an extra pass under the profiler, after the timed one (the profiler slows what it sees)
        with profiled(device, f"learner, {'shared' if share else 'padded'}", args.profile):
            update(learner.optimizer, work, settings, learner.pad_id, shuffle_seed=0)
            sync(device)
    lm = learner.model.lm
    return {"seconds": seconds, "trained": stats["update_tokens"], "computed": stats["update_computed_tokens"],
            "peak_mib": memory.mib, "attention": lm.config._attn_implementation, "lm": lm}


def optimizer_steps(items, minibatch: int) -> int:
    from ragteam.trainers.algorithms.ppo import minibatches

    return len(minibatches(items, minibatch, random.Random(0)))


def bare_phase(path: str, items, args, steps: int) -> dict:
    """The same weights as a plain causal LM: rows of the mean call length, CE, backward, AdamW."""
    from transformers import AutoModelForCausalLM

    from ragteam.nodes.policies.device import resolve_device, resolve_dtype

    device = torch.device(resolve_device(args.device))
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(device, args.bf16)).to(device).train()
    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-6)
    total = sum(e.n_tokens for e in items)
    n_rows = len(items)
    row = max(2, total // n_rows)  # n_rows × row: the buffer's tokens, less under one per row
    rows_per_micro = max(1, args.micro_batch_tokens // row)
    generator = torch.Generator().manual_seed(0)
    data = torch.randint(100, lm.config.vocab_size, (n_rows, row), generator=generator)
    micro = [data[i:i + rows_per_micro] for i in range(0, n_rows, rows_per_micro)]
    per_step = math.ceil(len(micro) / max(steps, 1))

    def one_pass():
        for i, chunk in enumerate(micro):
            chunk = chunk.to(device)
            loss = lm(input_ids=chunk, labels=chunk).loss
            (loss / per_step).backward()
            if (i + 1) % per_step == 0 or i == len(micro) - 1:
                torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        one_pass()
    with PeakMemory(device) as memory:
        sync(device)
        started = time.perf_counter()
        one_pass()
        sync(device)
        seconds = time.perf_counter() - started
    if args.profile:
        with profiled(device, "bare loop", args.profile):
            one_pass()
            sync(device)
    return {"seconds": seconds, "trained": n_rows * row, "computed": n_rows * row, "peak_mib": memory.mib,
            "attention": lm.config._attn_implementation, "lm": lm}


def flops_per_token(lm) -> tuple[float, float]:
    """(6 × parameters outside embeddings and head, 6 × head parameters): training FLOPs per token
    of the body and, separately, of the vocabulary projection."""
    head = lm.get_output_embeddings().weight.numel()
    embed = lm.get_input_embeddings().weight.numel()
    tied = lm.get_output_embeddings().weight is lm.get_input_embeddings().weight
    body = sum(p.numel() for p in lm.parameters()) - embed - (0 if tied else head)
    return 6.0 * body, 6.0 * head


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a local HF model directory or 'offline' (default: a tiny random Llama)")
    parser.add_argument("--layers", type=int, default=2, help="tiny model: layers")
    parser.add_argument("--hidden", type=int, default=128, help="tiny model: hidden size")
    parser.add_argument("--device", default="auto", help="cpu, cuda[:N] or auto")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                        help="bfloat16 weights (default: on CUDA)")
    parser.add_argument("--groups", type=int, default=2, help="questions (GRPO groups)")
    parser.add_argument("--samples", type=int, default=4, help="calls per group sharing the planner prompt")
    parser.add_argument("--prompt-tokens", type=int, default=192, help="the shared planner prompt")
    parser.add_argument("--answer-prompt-tokens", type=int, default=256, help="each unshared answerer prompt")
    parser.add_argument("--completion-tokens", type=int, default=24, help="mean completion length")
    parser.add_argument("--minibatch", type=int, default=8, help="calls per optimizer step")
    parser.add_argument("--micro-batch-tokens", type=int, default=2048)
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes first (allocations, compiles)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after each phase, profile one more pass and print its top N operators")
    parser.add_argument("--peak-tflops", type=float, help="the device's peak for MFU (default: by GPU name)")
    args = parser.parse_args(argv)
    from ragteam.nodes.policies.device import resolve_device

    device = torch.device(resolve_device(args.device))
    args.device = str(device)
    if args.bf16 is None:
        args.bf16 = device.type == "cuda"
    with tempfile.TemporaryDirectory(prefix="ragteam-bench-learner-") as scratch:
        if args.model and args.model.startswith("offline"):
            from ragteam.nodes.policies.spec import model_dir

            args.model = model_dir(args.model)
        path = args.model or tiny_model(Path(scratch) / "model", args.layers, args.hidden)
        from transformers import AutoConfig

        vocab = AutoConfig.from_pretrained(path).vocab_size
        items = grpo_buffer(args.groups, args.samples, args.prompt_tokens, args.answer_prompt_tokens,
                            args.completion_tokens, vocab)
        steps = optimizer_steps(items, args.minibatch)
        rows = {"bare loop": bare_phase(path, items, args, steps)}
        for share, name in ((True, "learner, shared"), (False, "learner, padded")):
            rows[name] = learner_phase(path, items, args, share)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = args.peak_tflops or next((v for k, v in PEAK_TFLOPS.items() if k in name), None)
    completion = sum(len(e.completion_ids) for e in items)
    print(f"{args.model or f'tiny random Llama ({args.layers} layers, hidden {args.hidden})'} on {name}, "
          f"{'bf16' if args.bf16 else 'fp32'}; buffer: {len(items)} calls, {sum(e.n_tokens for e in items)} tokens "
          f"({args.groups} groups x {args.samples} samples + one unshared call each), {steps} optimizer steps")
    print(f"{'':18} {'attention':>13} {'seconds':>8} {'trained tok':>11} {'trained tok/s':>13} "
          f"{'computed tok/s':>14} {'MFU':>6} {'peak MiB':>9}")
    for label, r in rows.items():
        mfu = "-"
        if device.type == "cuda" and peak:
            body, head = flops_per_token(r["lm"])
            head_tokens = r["computed"] if label == "bare loop" else completion
            mfu = f"{(body * r['computed'] + head * head_tokens) / r['seconds'] / (peak * 1e12):.1%}"
        print(f"{label:18} {r['attention']:>13} {r['seconds']:8.2f} {r['trained']:11d} "
              f"{r['trained'] / r['seconds']:13.0f} {r['computed'] / r['seconds']:14.0f} {mfu:>6} {r['peak_mib']:9.0f}")
    bare = rows["bare loop"]["trained"] / rows["bare loop"]["seconds"]
    for label in ("learner, shared", "learner, padded"):
        r = rows[label]
        print(f"{label} vs bare loop: {r['trained'] / r['seconds'] / bare:.2f} (trained tokens), "
              f"{r['computed'] / r['seconds'] / bare:.2f} (computed tokens)")
    ratio = rows["learner, shared"]["trained"] / rows["learner, shared"]["seconds"] / bare
    print(f"learner vs bare loop: {ratio:.2f}")
    return ratio


if __name__ == "__main__":
    main()
