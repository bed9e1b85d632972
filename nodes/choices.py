"""A role that chooses among given replies instead of writing any: the planner of a fixed menu
of workflows (``Settings.planning.choices``), as a router picks one of its labels.

The policy scores every reply of the menu (the log-probability of its tokens after the prompt,
``score_replies``) and the call draws one in proportion to exp(score): at temperature 0 the
likeliest, else a sample from the menu's own softmax. The chosen reply is traced as sampled, with
its per-token log-probs, so the learner's ratio is the usual token-level one. When a question's
advantages sum to 0 (its sampled runs centred on their mean; written alternatives under
``ppo.written_replies: menu``) the first-epoch gradient of those tokens is the gradient of the
menu's log-softmax, Σ A ∇ log p_menu(a) = Σ A (∇ s_a − E_menu ∇ s): the normaliser's term
cancels — exactly with ``ppo.loss_aggregation: per_token``; per call (the default) each reply's
push is divided by its token count — and nothing outside the menu can take the probability an
update moves (docs/results/learning_gate.md, run 33: a workflow no group trained took it all).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import torch

from ragteam.nodes.policies.protocol import Generation, GenerationRequest, Policy, written_reply


def menu(settings, role: str) -> list[str] | None:
    """The replies ``role`` chooses among in a run with ``settings`` (None: it writes its own)."""
    from ragteam.nodes.roles.jade import PLANNER, workflow_reply

    if role == PLANNER.name and settings.planning.choices:
        return [workflow_reply(workflow) for workflow in settings.planning.choices]
    return None


async def scored_menu(policy: Policy, request: GenerationRequest,
                      texts: Sequence[str]) -> tuple[list[Generation], torch.Tensor, list[list[float]]]:
    """Each of ``texts`` as ``policy`` would record it for ``request``, the menu's probability of
    each (the softmax of the replies' total log-probs) and each reply's per-token log-probs."""
    score = getattr(policy, "score_replies", None)
    if score is None:
        raise TypeError(f"policy {policy.name!r} cannot score given replies (no score_replies), so it "
                        "cannot choose among planning.choices; the hf policy can")
    replies = [written_reply(policy, request, text) for text in texts]
    logprobs = await score(request, replies)
    totals = torch.tensor([sum(row) for row in logprobs])
    if not torch.isfinite(totals).any():
        raise ValueError(f"policy {policy.name!r} gives every reply of the menu probability 0")
    return replies, torch.softmax(totals, dim=0), logprobs


async def choose_reply(policy: Policy, request: GenerationRequest, texts: Sequence[str]) -> Generation:
    """One of ``texts`` for ``request``, chosen by ``policy`` as above, with its log-probs."""
    replies, probabilities, logprobs = await scored_menu(policy, request, texts)
    if request.sampling.greedy:
        index = int(torch.argmax(probabilities))  # ties: the first listed
    else:
        index = int(torch.multinomial(probabilities, 1))
    return replace(replies[index], logprobs=list(logprobs[index]), finish_reason="stop")
