"""Bind a role to any langchain-core chat model (an API model, a local server...) as a frozen policy.

Such a policy is never trained, so it need not return token ids; token counts are taken from
the model's usage metadata when it reports them.
"""

from __future__ import annotations

from typing import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from ragteam.nodes.policies.protocol import Generation, GenerationRequest

_MESSAGE_TYPES = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}


class ChatModelPolicy:
    """A policy around any langchain-core chat model (an API model, a local server): it returns
    text alone, so it plays roles that are never trained, such as MAO-ARAG's executors."""

    exact_ids = False  # an API returns text, not the ids and log-probs it sampled

    def __init__(self, model: BaseChatModel, name: str | None = None):
        self.model = model
        self.name = name or f"chat:{type(model).__name__}"

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        # A prefix becomes a trailing assistant message: providers that support prefill continue
        # it; the others answer after it, which still carries the rollout so far.
        conversations = [[_MESSAGE_TYPES[m["role"]](content=m["content"]) for m in r.messages]
                         + ([AIMessage(content=r.prefix)] if r.prefix else []) for r in requests]
        replies = await self.model.abatch(conversations)
        return [self._to_generation(request, reply) for request, reply in zip(requests, replies)]

    @staticmethod
    def _to_generation(request: GenerationRequest, reply) -> Generation:
        text = reply.content if isinstance(reply.content, str) else str(reply.content)
        for stop in request.sampling.stop:
            if stop in text:
                text = text[: text.index(stop) + len(stop)]
        usage = getattr(reply, "usage_metadata", None) or {}
        counts = (usage.get("input_tokens", 0), usage.get("output_tokens", 0)) if usage else None
        return Generation(text=text, finish_reason="stop", reported_usage=counts)
