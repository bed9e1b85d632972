"""Reading actions out of model text. Nothing here raises on model output: a parse either
succeeds or returns a ``Parsed`` with ``ok=False`` and the reason, plus the fallback action the
runtime should use instead.

Every scanner here is linear in the text it reads, and reads at most ``MAX_PARSE_CHARS``: a
chat-model policy can return hundreds of kilobytes, and a parser runs inside the event loop
that every concurrent question shares. Numbers are at most ``MAX_DIGITS`` digits long (a
longer digit run is not a number the runtime can use, and ``int()`` refuses past 4,300).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

MAX_PARSE_CHARS = 20_000
MAX_DIGITS = 6
NUMBER = rf"(?<!\d)\d{{1,{MAX_DIGITS}}}(?!\d)"   # a bounded digit run, never part of a longer one


@dataclass(frozen=True)
class Parsed:
    """What a role's parser read from a reply: the action, or a violation with its reason and
    the fallback action the runtime uses instead."""

    action: Any          # what the runtime acts on (the fallback when ok is False)
    ok: bool = True
    reason: str = ""     # why the output violated the format

    @staticmethod
    def violation(reason: str, fallback: Any) -> "Parsed":
        return Parsed(action=fallback, ok=False, reason=reason)


def _readable(text: str) -> str:
    return text[:MAX_PARSE_CHARS]


def tag_content(text: str, tag: str) -> str | None:
    """Content of the first ``<tag>…</tag>``. A missing close tag is tolerated (generation may
    stop on the close tag's first tokens): the content then runs to the end. None if absent."""
    text = _readable(text)
    opening = re.search(f"<{re.escape(tag)}>", text, flags=re.I)
    if opening is None:
        return None
    closing = re.compile(f"</{re.escape(tag)}>", flags=re.I).search(text, opening.end())
    return text[opening.end(): closing.start() if closing else len(text)].strip()


_NUMBERED = {}


def numbered_tags(text: str, prefix: str = "q") -> list[str]:
    """Contents of ``<q1>…</q1>, <q2>…`` in numeric order, empty ones dropped. An item ends at its
    close tag, at the next numbered tag, or at the end of the text."""
    pattern = _NUMBERED.get(prefix)
    if pattern is None:
        p = re.escape(prefix)
        pattern = _NUMBERED[prefix] = re.compile(
            rf"<{p}(\d{{1,{MAX_DIGITS}}})>(.*?)(?:</{p}\1>|(?=<{p}\d{{1,{MAX_DIGITS}}}>)|\Z)", re.S | re.I)
    found = pattern.findall(_readable(text))
    ordered = sorted(((int(n), body.strip()) for n, body in found), key=lambda item: item[0])
    return [body for _, body in ordered if body]


def strip_markup(text: str) -> str:
    """Plain text of a reply with any tags removed, collapsed to one line."""
    return " ".join(re.sub(r"</?[A-Za-z_][\w-]{0,40}>", " ", _readable(text)).split())


def numbers(text: str) -> list[int]:
    """The bounded digit runs of ``text`` as integers, in order."""
    return [int(n) for n in re.findall(NUMBER, _readable(text))]


def tagged_text(tag: str, default: str | Callable[[Any], str],
                limit: int = 200) -> Callable[[str, Any], Parsed]:
    """A parser for free text inside ``<tag>``: on a missing or empty tag, the reply's plain
    text (at most ``limit`` characters) is the fallback, or ``default`` when there is none."""
    def parse(text: str, observation: Any) -> Parsed:
        content = tag_content(text, tag)
        if content:
            return Parsed(content)
        fallback = strip_markup(text)[:limit] or (default(observation) if callable(default) else default)
        return Parsed.violation(f"no <{tag}> tag" if content is None else f"empty <{tag}>", fallback=fallback)
    return parse


def tag_choice(tag: str, choices: tuple[str, ...], fallback: str) -> Callable[[str, Any], Parsed]:
    """A parser for one of ``choices`` (case-insensitive) inside ``<tag>``; anything else is a
    violation whose action is ``fallback``."""
    def parse(text: str, observation: Any) -> Parsed:
        content = (tag_content(text, tag) or "").strip().lower()
        if content in choices:
            return Parsed(content)
        return Parsed.violation(f"<{tag}> must be {' or '.join(choices)}", fallback=fallback)
    return parse


REFERENCE = re.compile(rf"#({NUMBER})")  # "#2": the answer of sub-question 2


def references(question: str) -> list[int]:
    """The answers ``question`` refers to, as written: "Who is the wife of #2?" → [2]."""
    return [int(n) for n in REFERENCE.findall(question)]


def resolve_references(question: str, answer_for: Callable[[int], str | None]) -> str:
    """Replace each ``#n`` with ``answer_for(n)``; references without an answer stay as written."""
    def replace(match: re.Match) -> str:
        return answer_for(int(match.group(1))) or match.group(0)
    return REFERENCE.sub(replace, question)


# How a list answer separates its items ("Ann Lee, Bo Dee and Cy Fox"): the answer roles are told to
# give several names comma-separated; the set metric (graphs.eval.metrics) splits the same way.
LIST_SEPARATORS = re.compile(r"[,;\n]")
AND = re.compile(r"\band\b", re.I)


def list_items(text: str) -> list[str]:
    """The items of a list answer as written, first-seen order, no repeats or empties: the
    pieces between commas, semicolons, newlines and the word "and"."""
    pieces = (item.strip() for piece in LIST_SEPARATORS.split(text[:MAX_PARSE_CHARS]) for item in AND.split(piece))
    return list(dict.fromkeys(item for item in pieces if item))


def fan_out_references(question: str, answer_for: Callable[[int], str | None], limit: int) -> list[str]:
    """``question`` once per item of the first ``#n`` whose answer lists several items (at most
    ``limit`` of them), every other reference resolved as a whole; [] when no answer lists
    several. "Who is the sister of #1?" with #1 = "Bo Dee, Cy Fox" gives "Who is the sister of Bo
    Dee?" and "Who is the sister of Cy Fox?": one query per person, each one's article reachable."""
    checked: set[int] = set()  # each answer is split once, however often the question names it
    for match in REFERENCE.finditer(question):
        n = int(match.group(1))
        if n in checked:
            continue
        checked.add(n)
        items = list_items(answer_for(n) or "")
        if len(items) > 1:
            before = resolve_references(question[:match.start()], answer_for)
            after = resolve_references(question[match.end():], answer_for)
            return [before + item + after for item in items[:limit]]
    return []
