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

import copy
import threading
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, GenerationConfig, StoppingCriteria

from ragteam.nodes.policies.batching import RequestCoalescer
from ragteam.nodes.policies.grouped_attention import use_grouped_sdpa
from ragteam.nodes.policies.protocol import Generation, GenerationRequest


class StopTokenIndex:
    """Which token ids could complete a stop string, from the text each id adds to a sequence.

    A stop string first shows up in a row's decoded tail at the step whose new token adds its
    last character (earlier text was already checked, and dropping the window's first token
    only removes text from the front). So only rows whose newest token's text holds the last
    character of one of their stop strings need decoding. Ids whose added text cannot be told
    apart from context (a byte of a multi-byte character decodes to U+FFFD; a decode that is not
    the anchor's text plus a piece) are always checked, as is every id for a stop string that
    is empty or holds U+FFFD itself: the check stays exactly the full-decode one."""

    ANCHOR = "a"  # decoded before each id: SentencePiece drops the leading space of a text's first token

    def __init__(self, tokenizer):
        anchor = tokenizer.encode(self.ANCHOR, add_special_tokens=False)
        head = tokenizer.decode(anchor, skip_special_tokens=False)
        texts = tokenizer.batch_decode([anchor + [i] for i in range(len(tokenizer))], skip_special_tokens=False)
        self.pieces = [t[len(head):] if t.startswith(head) else None for t in texts]
        self._tables: dict[tuple[str, ...], torch.Tensor] = {}

    def candidates(self, stops: tuple[str, ...]) -> torch.Tensor:
        """Bool [len(tokenizer)]: ids after which a row with these stop strings is decoded."""
        if stops not in self._tables:
            if not stops:
                table = torch.zeros(len(self.pieces), dtype=torch.bool)
            elif any(s == "" or "\ufffd" in s for s in stops):
                table = torch.ones(len(self.pieces), dtype=torch.bool)
            else:
                ends = {s[-1] for s in stops}
                table = torch.tensor([p is None or "\ufffd" in p or any(c in p for c in ends)
                                      for p in self.pieces], dtype=torch.bool)
            self._tables[stops] = table
        return self._tables[stops]


class _PerRowStop(StoppingCriteria):
    """Marks a row finished at its first EOS, stop string or token budget, and remembers where.

    Not ``GenerationConfig(stop_strings=...)``: one batch mixes roles with different stop strings
    and budgets, and the trace needs each row's end position and finish reason, while
    ``stop_strings`` is one set for the whole call and reports neither.

    The whole batch is checked with tensor ops, never row by row on the device (each ``int()``
    of a CUDA tensor is a sync; checked row by row, HFPolicy ran at 0.24× plain ``generate`` at
    batch 64 on an H100). Without stop
    strings the state stays beside the model and nothing is transferred; with them it lives on
    the host and each step copies the rows' recent tokens over once, and only rows whose newest
    token could complete one of their stop strings (``StopTokenIndex``) decode their tail."""

    REASONS = ("length", "eos", "stop")

    def __init__(self, tokenizer, prompt_len: int, stops: list[tuple[str, ...]], budgets: list[int],
                 eos_ids: set[int], index: StopTokenIndex | None = None, device: torch.device | str = "cpu"):
        self.tokenizer = tokenizer
        self.prompt_len = prompt_len
        self.stops = stops = [tuple(row) for row in stops]
        self._tail = 8 + max((len(s) for row in stops for s in row), default=0)
        self._text = any(stops)
        where = torch.device("cpu") if self._text else torch.device(device)
        self._ends = torch.zeros(len(stops), dtype=torch.long, device=where)  # 0: still open
        self._reasons = torch.zeros(len(stops), dtype=torch.long, device=where)  # index in REASONS
        self._budgets = torch.tensor(budgets, dtype=torch.long, device=where)
        self._eos = torch.tensor(sorted(eos_ids), dtype=torch.long, device=where)
        if self._text:
            index = index or StopTokenIndex(tokenizer)
            kinds = sorted(set(stops))
            self._table = torch.stack([index.candidates(k) for k in kinds])  # [kinds, ids]
            self._kind = torch.tensor([kinds.index(s) for s in stops])

    @property
    def ends(self) -> list[int | None]:
        """Completion length at each row's finish (None: it never finished)."""
        return [e or None for e in self._ends.tolist()]

    @property
    def reasons(self) -> list[str]:
        return [self.REASONS[r] for r in self._reasons.tolist()]

    def __call__(self, input_ids: torch.LongTensor, scores=None, **kwargs) -> torch.BoolTensor:
        n_new = input_ids.shape[1] - self.prompt_len
        # the one device→host copy of a step (none without stop strings)
        recent = input_ids[:, -min(n_new, self._tail):].cpu() if self._text else input_ids[:, -1:]
        last = recent[:, -1]
        still = self._ends == 0
        eos = still & torch.isin(last, self._eos)
        stop = torch.zeros_like(still)
        if self._text:
            known = last < self._table.shape[1]  # ids past the tokenizer's table: always decoded
            maybe = still & ~eos & (~known | self._table[self._kind, last.clamp(max=self._table.shape[1] - 1)])
            for row in maybe.nonzero().flatten().tolist():  # host tensors: no device sync
                tail = self.tokenizer.decode(recent[row].tolist(), skip_special_tokens=False)
                stop[row] = any(s in tail for s in self.stops[row])
        length = still & ~eos & ~stop & (self._budgets <= n_new)
        # masked_fill, not boolean indexing: indexing with a mask syncs to count its rows
        self._ends.masked_fill_(eos | stop | length, n_new)
        self._reasons.masked_fill_(eos, 1).masked_fill_(stop, 2)
        done = self._ends > 0
        if done.device != input_ids.device and input_ids.device.type == "cuda":
            # from pinned memory without blocking: a pageable copy would be the step's second sync
            return done.pin_memory().to(input_ids.device, non_blocking=True)
        return done.to(input_ids.device)


def _similar_groups(requests: list[GenerationRequest], prompt_ids: list[list[int]],
                    stretch: float = 1.25, slack: int = 16, by_role: bool = True) -> list[list[int]]:
    """Indices grouped by role (unless ``by_role`` is false), then into runs of prompt lengths
    within ``stretch`` × the shortest (+ ``slack`` tokens), so padding stays small."""
    role = (lambda i: requests[i].role) if by_role else (lambda i: "")
    order = sorted(range(len(requests)), key=lambda i: (role(i), len(prompt_ids[i])))
    groups: list[list[int]] = []
    for i in order:
        first = groups[-1][0] if groups else None
        if (first is None or role(i) != role(first)
                or len(prompt_ids[i]) > stretch * len(prompt_ids[first]) + slack):
            groups.append([])
        groups[-1].append(i)
    return groups


MIN_CACHED_PREFIX = 32  # a shorter common prompt prefix is computed in every row
SCORE_ROWS = 16         # (call, reply) rows scored in one forward: their logits, ~16 × 50 × 49k floats


@dataclass(frozen=True)
class ScoreJob:
    """One ``score_replies`` call: its request and the replies to score after its prompt."""

    request: GenerationRequest
    replies: tuple[Generation, ...]


def common_prefix(rows: Sequence[Sequence[int]]) -> int:
    """The rows' longest common prefix, kept short of the shortest row (its last token must be
    computed in the row: its output samples the first new token)."""
    limit = min(len(r) for r in rows) - 1
    n = 0
    while n < limit and all(r[n] == rows[0][n] for r in rows[1:]):
        n += 1
    return n


def render_prompt(tokenizer, request: GenerationRequest) -> str:
    """The exact text a model is conditioned on: chat template + the assistant's prefix."""
    return tokenizer.apply_chat_template(
        list(request.messages), tokenize=False, add_generation_prompt=True) + request.prefix


def encode_prompt(tokenizer, request: GenerationRequest) -> tuple[str, list[int]]:
    """(prompt text, its ids), tokenized once without extra special tokens, so that
    ``decode(ids)`` is exactly the text: every policy sends these ids, never the text."""
    text = render_prompt(tokenizer, request)
    return text, tokenizer(text, add_special_tokens=False).input_ids


class TokenizerReplies:
    """``encode_reply`` (``protocol.written_reply``) for a policy holding a Hugging Face
    ``tokenizer``: the prompt encoded as ``generate`` encodes it, the reply tokenized once and
    recorded with the adapter that would have sampled it. ``adapters``: the per-role LoRA
    adapters' map (``nodes.policies.role_adapters.RoleMap``) of a policy serving a team."""

    adapters = None

    def _adapter_of(self, role: str) -> str:
        """The adapter that plays ``role`` ("" = the base weights, or no per-role adapters)."""
        return self.adapters.adapter_of(role) if self.adapters is not None else ""

    def encode_reply(self, request: GenerationRequest, text: str) -> Generation:
        prompt_text, prompt_ids = encode_prompt(self.tokenizer, request)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return Generation(text=self.tokenizer.decode(ids, skip_special_tokens=True), prompt_text=prompt_text,
                          prompt_ids=prompt_ids, completion_ids=ids, logprobs=[],
                          adapter=self._adapter_of(request.role))


class HFPolicy(TokenizerReplies):
    """A causal LM from a local directory (or an already-loaded model/tokenizer pair). A team
    that freezes the roles it plays binds it as ``nodes.team.Frozen``."""

    exact_ids = True

    def __init__(self, model, tokenizer, name: str = "hf", max_batch_size: int = 32,
                 gather_window_s: float = 0.01, adapters=None, mix_roles: bool = False):
        # per-role LoRA adapters of ``model`` (``nodes.policies.role_adapters.RoleMap``): each
        # decoding group is one role's (``_similar_groups``), decoded with its adapter active;
        # with ``mix_roles`` a group holds calls of any roles (grouped by prompt length alone) and
        # each row decodes under its own role's adapter in the one batch (peft's mixed-adapter
        # forward) — fewer, larger batches, for a GPU, where a batch's rows cost little
        self.adapters = adapters
        self.mix_roles = mix_roles
        self.model = model.eval()
        use_grouped_sdpa(model)  # on a CPU: no copy of the KV cache per decode step
        self.tokenizer = tokenizer
        self.name = name
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._eos_ids = {self.tokenizer.eos_token_id}
        config_eos = getattr(model.generation_config, "eos_token_id", None)
        self._eos_ids.update(config_eos if isinstance(config_eos, list) else [config_eos] if config_eos is not None else [])
        self._lock = threading.Lock()  # one generate at a time on the shared weights
        self._stop_index: StopTokenIndex | None = None  # built on the first batch with stop strings
        self.coalescer = RequestCoalescer(self.generate_batch, max_batch_size, gather_window_s)
        # menu choices (``score_replies``): a batch is one adapter's, any temperatures
        self.scorer = RequestCoalescer(self.score_batch, max_batch_size, gather_window_s,
                                       key=lambda job: self._adapter_of(job.request.role))

    @classmethod
    def from_pretrained(cls, path: str | Path, name: str | None = None, device: str = "auto",
                        bf16: bool = False, **kwargs) -> "HFPolicy":
        from ragteam.nodes.policies.device import resolve_device, resolve_dtype
        from ragteam.nodes.policies.model_files import one_line

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

    def load_weights(self, state_dict) -> None:
        """Replace the model's weights between two decoding batches (a snapshot that samples
        while another copy trains, synced from any thread)."""
        with self._lock, torch.no_grad():
            self.model.load_state_dict(state_dict)

    async def score_replies(self, request: GenerationRequest, replies: Sequence[Generation]) -> list[list[float]]:
        """Per-token log-probs of each of ``replies`` (``encode_reply``s of ``request``) at the
        request's temperature, as ``generate`` would have recorded had it sampled them: what a
        role choosing among given replies draws from (``nodes.choices``). Concurrent calls are
        scored together (``score_batch``)."""
        prompt = replies[0].prompt_ids
        if any(list(r.prompt_ids) != list(prompt) for r in replies):
            raise ValueError("score_replies: every reply must continue the same prompt")
        [scored] = await self.scorer.submit([ScoreJob(request, tuple(replies))])
        return scored

    def score_batch(self, jobs: list["ScoreJob"]) -> list[list[list[float]]]:
        """``score_replies`` of several calls of one adapter (the coalescer's batch): the prompts'
        common prefix (a role's instruction: most of a 264-token planner prompt) is computed
        once; each (call, reply) row holds the rest of its prompt, then the reply, padded on the
        right (causal attention: padding after a row's tokens changes none of its log-probs)."""
        pad = self.tokenizer.pad_token_id
        rows = [(list(job.replies[0].prompt_ids), list(reply.completion_ids), job.request.sampling.temperature)
                for job in jobs for reply in job.replies]
        # common_prefix leaves each row ≥ 1 prompt token of its own: its last predicts the reply's first
        head = common_prefix([prompt for prompt, _, _ in rows])
        found: list[list[float]] = []
        with self._lock, torch.inference_mode(), self._active(self._adapter_of(jobs[0].request.role)):
            device = self.model.device
            prefix = self._computed_prefix(torch.tensor([rows[0][0][:head]], device=device)) if head else None
            for start in range(0, len(rows), SCORE_ROWS):  # a chunk's logits: rows × width × vocab
                chunk = rows[start:start + SCORE_ROWS]
                tails = [prompt[head:] + reply for prompt, reply, _ in chunk]
                width = max(len(t) for t in tails)
                tokens = torch.tensor([t + [pad] * (width - len(t)) for t in tails], device=device)
                cache = None
                if prefix is not None:  # each chunk repeats its own copy of the prefix's cache
                    cache = copy.deepcopy(prefix)
                    cache.batch_repeat_interleave(len(chunk))
                logits = self.model(input_ids=tokens, past_key_values=cache, use_cache=cache is not None).logits
                for row, (prompt, reply, temperature) in enumerate(chunk):
                    first = len(prompt) - head - 1  # the position that predicts the reply's first token
                    scale = temperature if temperature > 0 else 1.0
                    step = torch.log_softmax(logits[row, first:first + len(reply)].float() / scale, dim=-1)
                    found.append(step.gather(1, torch.tensor(reply, device=device).unsqueeze(1)).squeeze(1).tolist())
        out, at = [], 0
        for job in jobs:
            out.append(found[at:at + len(job.replies)])
            at += len(job.replies)
        return out

    # -- batched decoding ---------------------------------------------------------------------
    def generate_batch(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Decode requests that share a decoding mode (the coalescer guarantees that).

        The batch is split into groups of one role and similar prompt length before decoding:
        a short planner prompt padded to a long answer-generator prompt, or a row decoding on
        for another role's larger token budget, costs more than the batching saves on a CPU. With
        ``mix_roles`` the groups are by prompt length alone (on an H100, 6 roles in one batch
        decoded 3.3× faster than in 6: docs/gpu.md)."""
        prompts, prompt_ids = map(list, zip(*(encode_prompt(self.tokenizer, r) for r in requests)))
        results: list[Generation | None] = [None] * len(requests)
        for group in _similar_groups(requests, prompt_ids, by_role=not self.mix_roles):
            outputs = self._decode([requests[i] for i in group], [prompts[i] for i in group],
                                   [prompt_ids[i] for i in group])
            for i, output in zip(group, outputs):
                results[i] = output
        return results

    def _decode(self, requests: list[GenerationRequest], prompts: list[str],
                prompt_ids: list[list[int]]) -> list[Generation]:
        pad = self.tokenizer.pad_token_id
        head = common_prefix(prompt_ids) if len(prompt_ids) > 1 else 0
        if head < MIN_CACHED_PREFIX:
            head = 0
        # rows: the shared prefix, then padding, then the row's own part (the padding is masked
        # out, and positions count real tokens only, so every row is computed as it would be alone)
        tail = max(len(ids) for ids in prompt_ids) - head
        width = head + tail
        input_ids = torch.tensor([ids[:head] + [pad] * (width - len(ids)) + ids[head:] for ids in prompt_ids])
        attention = torch.tensor([[1] * head + [0] * (width - len(ids)) + [1] * (len(ids) - head)
                                  for ids in prompt_ids])
        budgets = [r.sampling.max_new_tokens for r in requests]
        stops = [tuple(r.sampling.stop) for r in requests]
        temperature = requests[0].sampling.temperature
        config = GenerationConfig(
            max_new_tokens=max(budgets), do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None, top_k=0 if temperature > 0 else None,
            top_p=1.0 if temperature > 0 else None, pad_token_id=pad,
            eos_token_id=sorted(self._eos_ids), return_dict_in_generate=True, output_logits=True)
        adapters = [self._adapter_of(r.role) for r in requests]
        mixed = len(set(adapters)) > 1  # only with mix_roles: a group is otherwise one role's
        # peft's name for "no adapter" in a mixed batch is "__base__"
        per_row = {"adapter_names": [name or "__base__" for name in adapters]} if mixed else {}
        with self._lock, torch.inference_mode(), (nullcontext() if mixed else self._active(adapters[0])):
            if any(stops) and self._stop_index is None:
                self._stop_index = StopTokenIndex(self.tokenizer)
            stopper = _PerRowStop(self.tokenizer, width, stops, budgets, self._eos_ids, self._stop_index,
                                  self.model.device)
            input_ids, attention = input_ids.to(self.model.device), attention.to(self.model.device)
            cached = self._prefix_cache(input_ids[:1, :head], len(requests)) if head and not mixed else {}
            out = self.model.generate(input_ids=input_ids, attention_mask=attention,
                                      generation_config=config, stopping_criteria=[stopper], **per_row,
                                      **cached)
        chosen_logprobs = self._chosen_logprobs(out.logits, out.sequences[:, width:], temperature).cpu()
        new_tokens = out.sequences[:, width:].cpu()
        ends, reasons = stopper.ends, stopper.reasons
        results = []
        for row, request in enumerate(requests):
            end = ends[row] or min(budgets[row], new_tokens.shape[1])
            completion = new_tokens[row, :end].tolist()
            results.append(Generation(
                text=self.tokenizer.decode(completion, skip_special_tokens=True),
                prompt_text=prompts[row], prompt_ids=prompt_ids[row], completion_ids=completion,
                logprobs=chosen_logprobs[row, :end].tolist(), finish_reason=reasons[row], adapter=adapters[row]))
        return results

    def _prefix_cache(self, prefix: torch.Tensor, rows: int) -> dict:
        """``generate``'s cache holding ``prefix`` [1, P], computed once and repeated for ``rows``
        rows: a role's calls share their instruction and demonstrations (a planner prompt: ~245 of
        ~270 tokens), which each row would otherwise compute again."""
        cache = self._computed_prefix(prefix)
        cache.batch_repeat_interleave(rows)
        return {"past_key_values": cache}

    def _computed_prefix(self, prefix: torch.Tensor) -> DynamicCache:
        """A cache holding ``prefix`` [1, P], computed once (under the caller's lock)."""
        cache = DynamicCache(config=self.model.config)
        self.model(input_ids=prefix, past_key_values=cache, use_cache=True)
        return cache

    def _active(self, adapter: str):
        """The context in which the model decodes with ``adapter`` (no adapters: nothing to do)."""
        return self.adapters.active(self.model, adapter) if self.adapters is not None else nullcontext()

    @staticmethod
    def _chosen_logprobs(step_logits, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
        """log pi(token_t) per step, computed step by step to avoid a [B, T, vocab] tensor, on the
        logits' device: only the [B, T] result crosses to the host, not every step's logits."""
        scale = temperature if temperature > 0 else 1.0
        columns = []
        tokens = tokens.to(step_logits[0].device) if len(step_logits) else tokens
        for t, logits in enumerate(step_logits):
            logp = torch.log_softmax(logits.float() / scale, dim=-1)
            columns.append(logp.gather(1, tokens[:, t:t + 1]).squeeze(1))
        return torch.stack(columns, dim=1)
