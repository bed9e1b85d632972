"""Rule-based executors for the routing world (``stores.routing_world``): competent without
training, so that what a planner learns there is which workflow pays, nothing else.

They read the world's two templates, the question and the article sentence, and reply in each
role's own format, so the runtime parses and traces them like a model's replies:

- **QDS** writes the question's chain, innermost link first (``Who is the mother of #1?``); a
  one-hop question becomes itself plus ``Who is #1?``, so decomposing it is correct but dearer;
- **AG** follows the chain through the documents it was shown, link by link, and says it does not
  know where a link's article is missing (so one retrieval answers one hop, rarely more);
- **AS** gives the last sub-question's answer; every other role replies as its plumbing does.

``load_policy("rules:routing-world")`` (``nodes.policies.spec``) returns one; as MAO-ARAG's frozen
executors it is ``--frozen-policy rules:routing-world`` or ``frozen_policy:`` in a training config.
"""

from __future__ import annotations

import re

from ragteam.nodes.policies.protocol import GenerationRequest
from ragteam.nodes.policies.scripted import ScriptedPolicy, asked_question, user_content
from ragteam.nodes.roles import plumbing_rule
from ragteam.nodes.roles.jade import answer_reply, subquestions_reply
from ragteam.stores.routing_world import identity_of, relation_chain

UNKNOWN = "I don't know"
_FACT = re.compile(r"The (mother|father) of (.+?) is (.+?)\.(?=\s|$)")
_FINDING = re.compile(r"^\d+\. .* -> (.*)$", flags=re.M)


def _facts(text: str) -> dict[tuple[str, str], str]:
    """(relation, person) → the related person, from every fact sentence in ``text``."""
    return {(relation, person): other for relation, person, other in _FACT.findall(text)}


def read_answer(request: GenerationRequest) -> str:
    """AG: the chain followed through the shown documents (an identity question: the person, when
    a document names them); ``UNKNOWN`` where a link is missing."""
    question, shown = asked_question(request), user_content(request)
    if (person := identity_of(question)) is not None:
        return answer_reply([person if person in shown.split("Question:")[0] else UNKNOWN])
    parsed = relation_chain(question)
    if parsed is None:
        return answer_reply([UNKNOWN])
    relations, current = parsed
    facts = _facts(shown)
    for relation in reversed(relations):
        current = facts.get((relation, current))
        if current is None:
            return answer_reply([UNKNOWN])
    return answer_reply([current])


def decompose(request: GenerationRequest) -> str:
    """QDS: the question's chain, one link per sub-question, innermost first."""
    question = asked_question(request)
    parsed = relation_chain(question)
    if parsed is None:
        return subquestions_reply([question, "Who is #1?"])
    relations, person = parsed
    if len(relations) == 1:
        return subquestions_reply([question, "Who is #1?"])
    inner, *outer = reversed(relations)
    steps = [f"Who is the {inner} of {person}?"]
    steps += [f"Who is the {relation} of #{n}?" for n, relation in enumerate(outer, 1)]
    return subquestions_reply(steps)


def synthesize(request: GenerationRequest) -> str:
    """AS: the last sub-question's answer."""
    found = _FINDING.findall(user_content(request))
    return answer_reply([found[-1].strip() if found and found[-1].strip() else UNKNOWN])


def routing_world_policy() -> ScriptedPolicy:
    """The routing world's executors (see the module docstring)."""
    return ScriptedPolicy({"QDS": decompose, "AG": read_answer, "AS": synthesize},
                          name="rules:routing-world", rule_source=plumbing_rule)


RULE_POLICIES = {"routing-world": routing_world_policy}
