"""Local Hugging Face ``transformers`` policy: batched generation with exact ids and log-probs.

Design points:
- Prompts are rendered with the tokenizer's chat template and tokenized *without* extra special
  tokens, so ``decode(prompt_ids)`` is exactly the rendered prompt.
- Batches are left-padded; each row stops on its own stop strings, EOS, or its own token budget
  (a per-row stopping criterion), and its completion is cut right after the token that stopped it.
- Behaviour log-probs are taken from the raw logits scaled by the request temperature. Sampling
  uses no top-k/top-p truncation, so those log-probs are exactly the sampling distribution.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, StoppingCriteria

from nodes.policies.batching import RequestCoalescer
from nodes.policies.protocol import Generation, GenerationRequest


class _PerRowStop(StoppingCriteria):
    """Marks a row finished at its first EOS, stop string or token budget, and remembers where.

    Not ``GenerationConfig(stop_strings=...)``: one batch mixes roles with different stop strings
    and budgets, and the trace needs each row's end position and finish reason, while
    ``stop_strings`` is one set for the whole call and reports neither."""

    def __init__(self, tokenizer, prompt_len: int, stops: list[tuple[str, ...]], budgets: list[int],
                 eos_ids: set[int]):
        self.tokenizer = tokenizer
        self.prompt_len = prompt_len
        self.stops = stops
        self.budgets = budgets
        self.eos_ids = eos_ids
        self.ends: list[int | None] = [None] * len(stops)  # completion length at finish
        self.reasons: list[str] = ["length"] * len(stops)
        self._tail = 8 + max((len(s) for row in stops for s in row), default=0)

    def __call__(self, input_ids: torch.LongTensor, scores=None, **kwargs) -> torch.BoolTensor:
        done = []
        n_new = input_ids.shape[1] - self.prompt_len
        for row, ids in enumerate(input_ids):
            if self.ends[row] is None:
                last = int(ids[-1])
                if last in self.eos_ids:
                    self.ends[row], self.reasons[row] = n_new, "eos"
                elif self.stops[row] and self._hits_stop(ids, row):
                    self.ends[row], self.reasons[row] = n_new, "stop"
                elif n_new >= self.budgets[row]:
                    self.ends[row], self.reasons[row] = n_new, "length"
            done.append(self.ends[row] is not None)
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    def _hits_stop(self, ids: torch.Tensor, row: int) -> bool:
        generated = ids[self.prompt_len:]  # never match a stop string inside the prompt
        tail = self.tokenizer.decode(generated[-self._tail:].tolist(), skip_special_tokens=False)
        return any(stop in tail for stop in self.stops[row])


def _similar_groups(requests: list[GenerationRequest], prompt_ids: list[list[int]],
                    stretch: float = 1.25, slack: int = 16) -> list[list[int]]:
    """Indices grouped by role, then into runs of prompt lengths within ``stretch`` × the
    shortest (+ ``slack`` tokens), so padding stays small."""
    order = sorted(range(len(requests)), key=lambda i: (requests[i].role, len(prompt_ids[i])))
    groups: list[list[int]] = []
    for i in order:
        first = groups[-1][0] if groups else None
        if (first is None or requests[i].role != requests[first].role
                or len(prompt_ids[i]) > stretch * len(prompt_ids[first]) + slack):
            groups.append([])
        groups[-1].append(i)
    return groups


def render_prompt(tokenizer, request: GenerationRequest) -> str:
    """The exact text a model is conditioned on: chat template + the assistant's prefix."""
    return tokenizer.apply_chat_template(
        list(request.messages), tokenize=False, add_generation_prompt=True) + request.prefix


def encode_prompt(tokenizer, request: GenerationRequest) -> tuple[str, list[int]]:
    """(prompt text, its ids), tokenized once without extra special tokens, so that
    ``decode(ids)`` is exactly the text: every backend sends these ids, never the text."""
    text = render_prompt(tokenizer, request)
    return text, tokenizer(text, add_special_tokens=False).input_ids


class TokenizerReplies:
    """``encode_reply`` (``protocol.written_reply``) for a policy holding a Hugging Face
    ``tokenizer``: the prompt encoded as ``generate`` encodes it, the reply tokenized once."""

    def encode_reply(self, request: GenerationRequest, text: str) -> Generation:
        prompt_text, prompt_ids = encode_prompt(self.tokenizer, request)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return Generation(text=self.tokenizer.decode(ids, skip_special_tokens=True), prompt_text=prompt_text,
                          prompt_ids=prompt_ids, completion_ids=ids, logprobs=[])


class HFPolicy(TokenizerReplies):
    """A causal LM from a local directory (or an already-loaded model/tokenizer pair)."""

    def __init__(self, model, tokenizer, name: str = "hf", max_batch_size: int = 32,
                 gather_window_s: float = 0.01, trainable: bool = True):
        self.trainable = trainable  # False: the team's frozen roles (their calls are not trained)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._eos_ids = {self.tokenizer.eos_token_id}
        config_eos = getattr(model.generation_config, "eos_token_id", None)
        self._eos_ids.update(config_eos if isinstance(config_eos, list) else [config_eos] if config_eos is not None else [])
        self._lock = threading.Lock()  # one generate at a time on the shared weights
        self.coalescer = RequestCoalescer(self.generate_batch, max_batch_size, gather_window_s)

    @classmethod
    def from_pretrained(cls, path: str | Path, name: str | None = None, device: str = "auto",
                        bf16: bool = False, **kwargs) -> "HFPolicy":
        from nodes.policies.device import resolve_device, resolve_dtype
        from nodes.policies.model_files import one_line

        where = resolve_device(device)
        dtype = resolve_dtype(where, bf16)
        try:  # what model_files cannot see (a config or tokenizer the library refuses) is one line too
            tokenizer = AutoTokenizer.from_pretrained(str(path))
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
        except Exception as error:  # noqa: BLE001 — the caller gets the folder and the cause
            raise ValueError(f"model {path}: cannot load it ({one_line(error)})") from error
        return cls(model.to(where), tokenizer, name=name or f"hf:{path}", **kwargs)

    # -- protocol ---------------------------------------------------------------------------
    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return await self.coalescer.submit(requests)

    # -- batched decoding ---------------------------------------------------------------------
    def generate_batch(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Decode requests that share a decoding mode (the coalescer guarantees that).

        The batch is split into groups of one role and similar prompt length before decoding:
        a short planner prompt padded to a long answer-generator prompt, or a row decoding on
        for another role's larger token budget, costs more than the batching saves on a CPU."""
        prompts, prompt_ids = map(list, zip(*(encode_prompt(self.tokenizer, r) for r in requests)))
        results: list[Generation | None] = [None] * len(requests)
        for group in _similar_groups(requests, prompt_ids):
            outputs = self._decode([requests[i] for i in group], [prompts[i] for i in group],
                                   [prompt_ids[i] for i in group])
            for i, output in zip(group, outputs):
                results[i] = output
        return results

    def _decode(self, requests: list[GenerationRequest], prompts: list[str],
                prompt_ids: list[list[int]]) -> list[Generation]:
        width = max(len(ids) for ids in prompt_ids)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompt_ids])
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompt_ids])
        budgets = [r.sampling.max_new_tokens for r in requests]
        stopper = _PerRowStop(self.tokenizer, width, [r.sampling.stop for r in requests], budgets,
                              self._eos_ids)
        temperature = requests[0].sampling.temperature
        config = GenerationConfig(
            max_new_tokens=max(budgets), do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None, top_k=0 if temperature > 0 else None,
            top_p=1.0 if temperature > 0 else None, pad_token_id=pad,
            eos_token_id=sorted(self._eos_ids), return_dict_in_generate=True, output_logits=True)
        with self._lock, torch.inference_mode():
            input_ids, attention = input_ids.to(self.model.device), attention.to(self.model.device)
            out = self.model.generate(input_ids=input_ids, attention_mask=attention,
                                      generation_config=config, stopping_criteria=[stopper])
        new_tokens = out.sequences[:, width:].cpu()
        chosen_logprobs = self._chosen_logprobs(out.logits, new_tokens, temperature)
        results = []
        for row, request in enumerate(requests):
            end = stopper.ends[row] or min(budgets[row], new_tokens.shape[1])
            completion = new_tokens[row, :end].tolist()
            results.append(Generation(
                text=self.tokenizer.decode(completion, skip_special_tokens=True),
                prompt_text=prompts[row], prompt_ids=prompt_ids[row], completion_ids=completion,
                logprobs=chosen_logprobs[row, :end].tolist(), finish_reason=stopper.reasons[row]))
        return results

    @staticmethod
    def _chosen_logprobs(step_logits, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
        """log pi(token_t) per step, computed step by step to avoid a [B, T, vocab] tensor."""
        scale = temperature if temperature > 0 else 1.0
        columns = []
        for t, logits in enumerate(step_logits):
            logp = torch.log_softmax(logits.float().cpu() / scale, dim=-1)
            columns.append(logp.gather(1, tokens[:, t:t + 1]).squeeze(1))
        return torch.stack(columns, dim=1)
