"""Reading actions out of model text. Nothing here raises on model output: a parse either
succeeds or returns a ``Parsed`` with ``ok=False`` and the reason, plus the fallback action the
runtime should use instead."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Parsed:
    action: Any          # what the runtime acts on (the fallback when ok is False)
    ok: bool = True
    reason: str = ""     # why the output violated the format

    @staticmethod
    def violation(reason: str, fallback: Any) -> "Parsed":
        return Parsed(action=fallback, ok=False, reason=reason)


def tag_content(text: str, tag: str) -> str | None:
    """Content of the first ``<tag>…</tag>``. A missing close tag is tolerated at the end of the
    text only (generation may stop on the close tag's first tokens); returns None if absent."""
    match = re.search(rf"<{tag}>(.*?)</{tag}>", text, flags=re.S | re.I)
    if match:
        return match.group(1).strip()
    match = re.search(rf"<{tag}>(.*)\Z", text, flags=re.S | re.I)
    return match.group(1).strip() if match else None


def numbered_tags(text: str, prefix: str = "q") -> list[str]:
    """Contents of ``<q1>…</q1>, <q2>…`` in numeric order, empty ones dropped."""
    found = re.findall(rf"<{prefix}(\d+)>(.*?)(?:</{prefix}\1>|(?=<{prefix}\d+>)|\Z)", text,
                       flags=re.S | re.I)
    ordered = sorted(((int(n), body.strip()) for n, body in found), key=lambda item: item[0])
    return [body for _, body in ordered if body]


def strip_markup(text: str) -> str:
    """Plain text of a reply with any tags removed, collapsed to one line."""
    return " ".join(re.sub(r"</?[A-Za-z_][\w-]*>", " ", text).split())
