"""Model inputs for a group of calls: padded rows (one call each) or packed rows that compute each
shared prompt once.

Why packing: the training buffer is mostly prompt (role instructions, demonstrations, retrieved
passages: ~18 prompt tokens per completion token), and the calls of a GRPO group share prompts
exactly — every sample's first planner call, and any later call whose inputs came out the same.
A padded batch runs every copy of a prompt forward and backward, plus padding up to its longest row.

A packed batch holds **segments**: one prompt followed by every completion that continues it.
Inside a segment, each completion token sees the prompt and its own earlier tokens only (a
block mask), and positions restart after the prompt, so every completion is computed exactly as
it would be alone: same positions, same visible tokens. Segments are laid side by side in rows
of up to ``ROW_TOKENS`` (first fit; a longer segment gets a row of its own) with a block-diagonal
mask between them, so a micro-batch is usually one row with no padding at all. Masked-out blocks
still cost attention, but attention is a small part of a step (a 1,100-token row of SmolLM2-135M:
6.5 s forward + backward with a 4D mask, within 8% of the unmasked causal kernel, measured here).

Calls of one role also share the start of their prompts (the instruction and demonstrations:
~245 of a planner prompt's ~270 tokens), whatever the question. Segments are laid in prompt
order, so one role's sit side by side, and a row's longest common prompt prefix is laid once at
its start (segment ``SHARED``), every segment holding only the rest of its prompt: each
segment's tokens see that prefix, their own prompt and their own completion, at the positions
they would have alone, so the outputs (and the gradients, summed over the calls) are those of
the calls computed one by one.

Both layouts are ``Batch``: the model reads hidden states at ``predict_at`` (the position whose
output predicts each completion token) and ``state_at`` (the last prompt token: the value).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import torch

from ragteam.nodes.policies.hf import common_prefix

ROW_TOKENS = 2048  # longest packed row (unless one segment is longer): bounds masked attention
PADDING, SHARED = -1, -2  # segment ids of padding and of the row's shared prompt prefix
MIN_SHARED_PREFIX = 16  # a shorter common prefix is left inside each segment


@dataclass
class Batch:
    input_ids: torch.Tensor        # [R, L] token ids, rows right-padded
    attention_mask: torch.Tensor | None  # [R, L] 1 on real tokens (padded), [R, 1, L, L] bool (packed),
                                         # or None (packed for a block-sparse kernel: see ``segments``)
    position_ids: torch.Tensor | None  # [R, L] (packed: positions restart after each prompt)
    rows: torch.Tensor             # [B] the row holding each call
    predict_at: torch.Tensor       # [B, C] position whose hidden state predicts completion token j
    state_at: torch.Tensor         # [B] position of the call's last prompt token
    completion_mask: torch.Tensor  # [B, C] 1 on real completion tokens
    completion_ids: torch.Tensor   # [B, C]
    temperatures: torch.Tensor     # [B] logit scale used when the tokens were sampled
    real_tokens: int = 0           # tokens actually computed (no padding, shared prompts once)
    segments: torch.Tensor | None = None  # [R, L] packed: each position's segment (PADDING, SHARED)
    owners: torch.Tensor | None = None    # [R, L] packed: 0 on a prompt, k + 1 on completion k

    def to(self, device: torch.device) -> "Batch":
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in moved.items():
            if isinstance(value, torch.Tensor):
                moved[name] = value.to(device)
        return Batch(**moved)


def _completion_tensors(completions: Sequence[Sequence[int]], temperatures: Sequence[float], pad_id: int):
    """(completion ids [B, C], mask [B, C], logit scales [B])."""
    width = max(max(len(c) for c in completions), 1)
    ids = [list(c) + [pad_id] * (width - len(c)) for c in completions]
    mask = [[1.0] * len(c) + [0.0] * (width - len(c)) for c in completions]
    scale = [t if t > 0 else 1.0 for t in temperatures]  # greedy calls recorded unscaled log-probs
    return torch.tensor(ids), torch.tensor(mask), torch.tensor(scale, dtype=torch.float32)


def may_attend(segment_q, segment_k, owner_q, owner_k, q, k):
    """The packed layout's visibility rule, elementwise (broadcast tensors, or a FlexAttention
    ``mask_mod``'s scalars): a query sees earlier positions of its own segment that are prompt or
    its own completion, and every earlier position of the row's shared prefix (``SHARED``); every
    position sees itself, so padding's softmax rows are never empty."""
    same = (segment_q == segment_k) & (segment_q >= 0) & ((owner_k == 0) | (owner_q == owner_k))
    shared = (segment_k == SHARED) & (segment_q != PADDING)
    return ((same | shared) & (q >= k)) | (q == k)


def make_batch(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
               temperatures: Sequence[float], pad_id: int) -> Batch:
    """One right-padded row per call (every prompt computed in full)."""
    width = max(len(p) + len(c) for p, c in zip(prompts, completions))
    ids, attn = [], []
    for p, c in zip(prompts, completions):
        seq = list(p) + list(c)
        ids.append(seq + [pad_id] * (width - len(seq)))
        attn.append([1] * len(seq) + [0] * (width - len(seq)))
    completion_ids, completion_mask, scale = _completion_tensors(completions, temperatures, pad_id)
    lens = torch.tensor([len(p) for p in prompts])
    offsets = torch.arange(completion_ids.shape[1]).unsqueeze(0)
    predict_at = (lens.unsqueeze(1) - 1 + offsets).clamp(max=width - 1)  # token p + j ← position p + j − 1
    return Batch(torch.tensor(ids), torch.tensor(attn), None, torch.arange(len(prompts)), predict_at,
                 lens - 1, completion_mask, completion_ids, scale,
                 real_tokens=sum(len(p) + len(c) for p, c in zip(prompts, completions)))


def segments(prompts: Sequence[Sequence[int]]) -> list[list[int]]:
    """Call indices grouped by identical prompt, in first-seen order."""
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for index, prompt in enumerate(prompts):
        by_prompt.setdefault(tuple(prompt), []).append(index)
    return list(by_prompt.values())


def shared_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """The length of the prompts' longest common prefix, kept short of every prompt's last token
    (it predicts a completion's first token and holds the value), when two or more prompts share
    at least ``MIN_SHARED_PREFIX`` tokens; else 0 (each segment keeps its whole prompt)."""
    n = common_prefix(prompts) if len(prompts) > 1 else 0
    return n if n >= MIN_SHARED_PREFIX else 0


def fill_rows(prompts: Sequence[Sequence[int]], extra: Sequence[int], capacity: int) -> list[list[int]]:
    """Segments (their prompts, and ``extra`` tokens each: the completions) dealt into rows of
    at most ``capacity`` tokens, each row counting its shared prefix once. In prompt order,
    segments whose prompts share a prefix (one role's instruction) form a family laid in rows of
    its own; the segments that share with none are laid together. A segment longer than
    ``capacity`` gets a row alone."""
    order = sorted(range(len(prompts)), key=lambda s: list(prompts[s]))
    families: list[list[int]] = []
    for s in order:
        if families and shared_prefix([prompts[families[-1][-1]], prompts[s]]):
            families[-1].append(s)
        else:
            families.append([s])
    loners = [f[0] for f in families if len(f) == 1]
    rows: list[list[int]] = []
    for family in [f for f in families if len(f) > 1] + ([loners] if loners else []):
        row: list[int] = []
        for s in family:
            candidate = row + [s]
            head = shared_prefix([prompts[candidate[0]], prompts[s]])  # sorted: first and last
            if row and head + sum(len(prompts[m]) - head + extra[m] for m in candidate) > capacity:
                rows.append(row)
                candidate = [s]
            row = candidate
        rows.append(row)
    return rows


def dense_mask(segment_of: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
    """[R, 1, L, L] booleans from the rows' ``segment_of`` and ``owner`` [R, L] (``may_attend``'s rule)."""
    at = torch.arange(segment_of.shape[1])
    return may_attend(segment_of.unsqueeze(2), segment_of.unsqueeze(1), owner.unsqueeze(2), owner.unsqueeze(1),
                      at.view(1, -1, 1), at.view(1, 1, -1)).unsqueeze(1)  # [R, 1, query, key]


def pack_batch(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
               temperatures: Sequence[float], pad_id: int, row_tokens: int = ROW_TOKENS,
               block: int | None = None) -> Batch:
    """Calls packed by shared prompt (see the module docstring); same outputs as ``make_batch``.

    ``block``: for a block-sparse attention kernel (FlexAttention on a GPU), which reads the rule
    from ``segments``/``owners``: the rows' width is padded to a multiple of the kernel's block
    and no dense mask is built (on the host, [R, L, L] of comparisons per micro-batch, which the
    GPU would wait for). None: the dense 4D mask, for SDPA."""
    groups = segments(prompts)
    firsts = [prompts[g[0]] for g in groups]
    extra = [sum(len(completions[i]) for i in g) for g in groups]
    rows = fill_rows(firsts, extra, row_tokens)
    heads = [shared_prefix([firsts[s] for s in members]) for members in rows]  # laid once per row
    lengths = [h + sum(len(firsts[s]) - h + extra[s] for s in members) for h, members in zip(heads, rows)]
    width = max(lengths)  # the fullest row; the others are right-padded to it
    if block:
        width = -(-width // block) * block

    n = len(prompts)
    c_width = max(max(len(c) for c in completions), 1)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    segment_of = torch.full((len(rows), width), PADDING, dtype=torch.long)
    owner = torch.zeros((len(rows), width), dtype=torch.long)         # 0 prompt, k + 1 completion k
    row_of, state_at = torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long)
    predict_at = torch.zeros((n, c_width), dtype=torch.long)
    for r, (members, head) in enumerate(zip(rows, heads)):
        if head:
            ids[r, :head] = torch.tensor(list(prompts[groups[members[0]][0]][:head]))
            positions[r, :head] = torch.arange(head)
            segment_of[r, :head] = SHARED
        at = head
        for s in members:
            prompt = prompts[groups[s][0]]
            p = len(prompt) - head  # the segment's own part of its prompt
            ids[r, at:at + p] = torch.tensor(list(prompt[head:]))
            positions[r, at:at + p] = head + torch.arange(p)
            segment_of[r, at:at + p] = s
            start = at + p
            for k, i in enumerate(groups[s]):
                c = len(completions[i])
                ids[r, start:start + c] = torch.tensor(list(completions[i]), dtype=torch.long)
                positions[r, start:start + c] = head + p + torch.arange(c)
                segment_of[r, start:start + c] = s
                owner[r, start:start + c] = k + 1
                row_of[i], state_at[i] = r, at + p - 1
                # token 0 is predicted by the last prompt token, token j by completion token j − 1
                predict_at[i, 0] = at + p - 1
                if c > 1:
                    predict_at[i, 1:c] = start + torch.arange(c - 1)
                predict_at[i, c:] = at + p - 1  # padding columns: masked out of every loss
                start += c
            at = start
    mask = None if block else dense_mask(segment_of, owner)
    completion_ids, completion_mask, scale = _completion_tensors(completions, temperatures, pad_id)
    return Batch(ids, mask, positions, row_of, predict_at, state_at, completion_mask,
                 completion_ids, scale, real_tokens=sum(lengths), segments=segment_of, owners=owner)


def batch_for(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
              temperatures: Sequence[float], pad_id: int, share_prompts: bool = True,
              block: int | None = None) -> Batch:
    """The packed batch (default; ``block`` as in ``pack_batch``) or the padded one
    (``share_prompts=False``, for comparison)."""
    if share_prompts:
        return pack_batch(prompts, completions, temperatures, pad_id, block=block)
    return make_batch(prompts, completions, temperatures, pad_id)
