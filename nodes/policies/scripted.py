"""A deterministic, zero-latency policy for fast tests and plumbing checks.

Responses are chosen per role by rules: a fixed string, a list consumed in order (the last entry
repeats), or a function of the request. Token ids are UTF-8 bytes, so they are exact and
lossless, like a real tokenizer's, and every behaviour log-prob is 0.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from typing import Callable, Mapping, Sequence, Union

from ragteam.nodes.policies.protocol import Generation, GenerationRequest

Rule = Union[str, Sequence[str], Callable[[GenerationRequest], str]]
try:  # the alias is public (``rt.Rule``, ``Role.plumbing``): help() should say what it means
    Rule.__doc__ = """How the scripted policy replies for one role: a fixed string (always that reply),
    a sequence of strings (one per call, in order; the last repeats), or a function of the
    ``GenerationRequest`` returning the reply text (e.g. built from the user message)."""
except (AttributeError, TypeError):  # typing versions whose unions take no attributes
    pass


def render_plain(request: GenerationRequest) -> str:
    turns = "".join(f"<{m['role']}>\n{m['content']}\n" for m in request.messages)
    return turns + "<assistant>\n" + request.prefix


def byte_ids(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def decode_byte_ids(ids: Sequence[int]) -> str:
    return bytes(ids).decode("utf-8")


def user_content(request: GenerationRequest) -> str:
    return next((m["content"] for m in reversed(request.messages) if m["role"] == "user"), "")


KEPT_REQUESTS = 256


class ScriptedPolicy:
    """Replies by rule, per role: ``rules`` first, then ``rule_source(role)`` (a live lookup,
    e.g. every role's plumbing rule), then ``default``."""

    def __init__(self, rules: Mapping[str, Rule], default: Rule | None = None, name: str = "scripted",
                 exact_ids: bool = True, delay_s: float = 0.0,
                 rule_source: Callable[[str], Rule | None] | None = None):
        self.rules = dict(rules)
        self.rule_source = rule_source
        self.default = default
        self.name = name
        self.exact_ids = exact_ids  # False: stands in for a policy whose ids are not exact (never trained)
        self.delay_s = delay_s
        self._cursor: dict[str, int] = {}
        # the latest requests, in order (for tests and debugging; bounded: a long run through a
        # scripted stand-in would otherwise keep every prompt it was ever asked)
        self.requests: deque[GenerationRequest] = deque(maxlen=KEPT_REQUESTS)

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """One reply per request, by rule; token ids are the reply's UTF-8 bytes."""
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return [self._answer(r) for r in requests]

    def _answer(self, request: GenerationRequest) -> Generation:
        text = self._reply_text(request)
        prompt = render_plain(request)
        completion = byte_ids(text)
        return Generation(text=text, prompt_text=prompt, prompt_ids=byte_ids(prompt),
                          completion_ids=completion, logprobs=[0.0] * len(completion))

    def encode_reply(self, request: GenerationRequest, text: str) -> Generation:
        """``text`` as if this policy had said it (``protocol.written_reply``); not a request."""
        prompt = render_plain(request)
        return Generation(text=text, prompt_text=prompt, prompt_ids=byte_ids(prompt),
                          completion_ids=byte_ids(text), logprobs=[])

    def _reply_text(self, request: GenerationRequest) -> str:
        """The rule's reply, cut after the first stop string as a real model's would be."""
        self.requests.append(request)
        text = self._respond(request)
        for stop in request.sampling.stop:
            if stop in text:
                text = text[: text.index(stop) + len(stop)]
        return text

    def _respond(self, request: GenerationRequest) -> str:
        rule = self.rules.get(request.role)
        if rule is None and self.rule_source is not None:
            rule = self.rule_source(request.role)
        if rule is None:
            rule = self.default
        if rule is None:
            raise KeyError(f"scripted policy has no rule for role {request.role!r} (give the role a "
                           "plumbing rule: Role(..., plumbing=...))")
        if callable(rule):
            return rule(request)
        if isinstance(rule, str):
            return rule
        index = self._cursor.get(request.role, 0)
        self._cursor[request.role] = index + 1
        return rule[min(index, len(rule) - 1)]


# -- helpers for roles' plumbing rules (valid replies built from the request, no model) ---------
def first_title(text: str) -> str:
    """The title of the first document shown in ``text`` (either document layout)."""
    match = (re.search(r"^\[0\] (.{1,200}?): ", text, flags=re.M)
             or re.search(r"^Doc 1 \((.{1,200}?)\): ", text, flags=re.M))
    return match.group(1) if match else "I don’t know"


def asked_question(request: GenerationRequest) -> str:
    """The last question line of the request's user message."""
    found = re.findall(r"^(?:Original question|Question|Search query): (.+)$", user_content(request),
                       flags=re.M)
    return found[-1] if found else ""
