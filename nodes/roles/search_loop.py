"""Single-context search agents (Search-R1, QAgent): one model writes reasoning, search calls and
the answer in one growing text; the runtime pastes retrieved passages back in between.

Each model call continues the rollout so far (``GenerationRequest.prefix``) until it closes a
``<search>`` or ``<answer>`` tag, and is one transition: its prompt ids are the whole context
up to that point, so the trainer gets one sample per segment rather than a pseudo-conversation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ragteam.nodes.parsing import Parsed, strip_markup, tag_content
from ragteam.nodes.policies.protocol import GenerationRequest
from ragteam.nodes.policies.scripted import asked_question, first_title
from ragteam.nodes.roles.base import DOC_CHARS, Role
from ragteam.stores.documents import Document

RETRY = ("\nMy last step was not a valid action. I should either search with <search> </search> "
         "or give the final answer with <answer> </answer>.\n")


# Appended to the rollout when the action budget is spent: the next call writes the answer.
FORCE_ANSWER = "\nI have no searches left, so I answer with what I found.\n<answer>"


@dataclass(frozen=True)
class LoopObservation:
    question: str


def information_block(documents: list[Document]) -> str:
    lines = [f"Doc {i} ({d.title}): {d.text[:DOC_CHARS]}" for i, d in enumerate(documents, 1)]
    return "\n<information>\n" + "\n".join(lines) + "\n</information>\n"


def parse_segment(max_queries: int):
    """An answer, a search (``<query>`` items inside ``<search>``, or its plain content), or a
    violation whose fallback asks the runtime to prompt a retry."""
    def parse(text: str, obs: LoopObservation) -> Parsed:
        answer = tag_content(text, "answer")
        if answer:
            return Parsed({"answer": answer})
        search = tag_content(text, "search")
        if search:
            queries = _queries(search)
            if len(queries) > max_queries:
                return Parsed.violation(f"{len(queries)} queries exceed {max_queries}",
                                        fallback={"search": queries[:max_queries]})
            return Parsed({"search": queries})
        return Parsed.violation("no <search> or <answer>", fallback={"retry": True})
    return parse


def _queries(search: str) -> list[str]:
    """``<query>`` items of a search block; a block without them is one query."""
    tagged = [q.strip() for q in re.findall(r"<query>(.*?)(?:</query>|(?=<query>)|$)", search, flags=re.S | re.I)]
    return [q for q in tagged if q] or [search.strip()]


def loop_plumbing(request: GenerationRequest) -> str:
    """Search the question once, then answer with the first passage's title."""
    if "<information>" not in request.prefix:
        return f"<search><query>{asked_question(request)}</query></search>"
    return f"<answer>{first_title(request.prefix)}</answer>"


def loop_agent(name: str, instruction: str, max_queries: int, max_new_tokens: int,
               shot: tuple[str, str]) -> Role:
    """A single-context agent: each call continues the rollout until it closes a search or an
    answer."""
    return Role(name=name, instruction=instruction, render=lambda o: f"Question: {o.question}",
                parse=parse_segment(max_queries), stop=("</search>", "</answer>"),
                max_new_tokens=max_new_tokens, plumbing=loop_plumbing, shots=(shot,))


SEARCH_R1 = loop_agent(
    "search_r1",
    "Answer the question. Think step by step inside <think></think>. Whenever you lack a fact, "
    "search for it by writing <search>query</search>; the results come back inside "
    "<information></information>. Search as often as you need. When you know the answer, write it "
    "in a few words inside <answer></answer>.",
    max_queries=1, max_new_tokens=128,
    shot=("Question: Who wrote the novel Dracula?",
          "<think>I need the author of Dracula.</think>\n<search>Dracula novel author</search>"))

QAGENT = loop_agent(
    "qagent",
    "Find the information needed to answer the question by searching in rounds. Each round: first "
    "plan inside <plan></plan>; then search with up to three queries as "
    "<search><query>first</query><query>second</query></search>; the results arrive inside "
    "<information></information>; then judge them inside <reflection></reflection>. Start a new "
    "round if something is still missing. When nothing more is needed, give the answer in a few "
    "words inside <answer></answer>.",
    max_queries=3, max_new_tokens=160,
    shot=("Question: Are the Louvre and the Prado in the same country?",
          "<plan>I need the country of each museum.</plan>\n<search><query>Louvre museum country"
          "</query><query>Prado museum country</query></search>"))


def parse_forced_answer(text: str, obs: LoopObservation) -> Parsed:
    """The continuation of an opened ``<answer>`` tag: the answer runs to ``</answer>``."""
    answer = strip_markup(tag_content("<answer>" + text.lstrip().removeprefix("<answer>"), "answer"))
    if answer:
        return Parsed(answer)
    return Parsed.violation("empty forced answer", fallback=strip_markup(text)[:200])


def forced_answer_role(role: Role) -> Role:
    """``role`` made to answer now: same agent (so it trains as that role), the rollout already
    ends inside ``<answer>``, and the call stops at ``</answer>``."""
    return replace(role, parse=parse_forced_answer, stop=("</answer>",), max_new_tokens=48,
                   plumbing=None)
