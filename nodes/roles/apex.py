"""APEX-Searcher's agents: a planning agent (ordered sub-questions with #n references) and the
execution agent's five decisions per sub-question — is the knowledge base already sufficient,
which query to try next, whether to keep searching, the sub-answer — plus the final synthesis."""

from __future__ import annotations

from dataclasses import dataclass

from ragteam.nodes.parsing import Parsed, numbered_tags, tag_choice, tag_content, tagged_text
from ragteam.nodes.policies.scripted import asked_question, first_title, user_content
from ragteam.nodes.roles.base import Role, documents_block, pairs_block
from ragteam.stores.documents import Document


@dataclass(frozen=True)
class ExecutionObservation:
    question: str                                  # the (resolved) sub-question, or the original
    knowledge: tuple[tuple[str, str], ...] = ()    # the knowledge base: solved (sub-question, answer)
    documents: tuple[Document, ...] = ()           # evidence gathered for this sub-question
    tried: tuple[str, ...] = ()                    # queries already issued for it
    max_items: int = 4


def _knowledge(o: ExecutionObservation) -> str:
    return pairs_block("Known so far", o.knowledge)


def _tried(o: ExecutionObservation) -> str:
    return ("Queries already tried:\n" + "\n".join(f"- {q}" for q in o.tried) + "\n\n") if o.tried else ""


def parse_plan(text: str, obs: ExecutionObservation) -> Parsed:
    steps = list(dict.fromkeys(numbered_tags(text, "q")))
    if not steps:  # APEX: a failed decomposition means the question is solved as one step
        return Parsed.violation("no <q1> sub-questions", fallback=[obs.question])
    if len(steps) > obs.max_items:
        return Parsed.violation(f"{len(steps)} sub-questions exceed {obs.max_items}",
                                fallback=steps[: obs.max_items])
    return Parsed(steps)


def decision_role(name: str, instruction: str, render, allowed: tuple[str, str], fallback: str,
                  shot: tuple[str, str]) -> Role:
    """A yes/no step of the execution agent: one of two words inside ``<decision>``; anything
    else is a violation that takes ``fallback``."""
    return Role(name=name, instruction=instruction, render=render,
                parse=tag_choice("decision", allowed, fallback), stop=("</decision>",),
                max_new_tokens=12, plumbing=f"<decision>{fallback}</decision>", shots=(shot,))


def parse_query(text: str, obs: ExecutionObservation) -> Parsed:
    query = tag_content(text, "query")
    if not query:
        return Parsed.violation("no <query> tag", fallback=obs.question)
    if query.lower() in {q.lower() for q in obs.tried}:
        return Parsed.violation("repeats an earlier query", fallback=query)
    return Parsed(query)


parse_answer = tagged_text("answer", default="unknown")


APEX_PLAN = Role(
    name="apex_plan",
    instruction=("Plan how to answer the question as an ordered list of at most 4 simple sub-questions, "
                 "each answerable by one search. A later sub-question may use an earlier answer by "
                 "writing #1, #2, …. A simple question needs only one sub-question. Write them as "
                 "<q1>…</q1>, <q2>…</q2> and so on."),
    render=lambda o: f"Question: {o.question}", parse=parse_plan, max_new_tokens=120,
    plumbing=lambda r: f"<q1>{asked_question(r)}</q1>",
    shots=(("Question: Which river flows through the capital of Austria?",
            "<q1>What is the capital of Austria?</q1>\n<q2>Which river flows through #1?</q2>"),))

APEX_SUFFICIENT = decision_role(
    "apex_check",
    "Decide whether what is already known answers the question. Write <decision>answer</decision> "
    "if it does, <decision>retrieve</decision> if a search is needed.",
    render=lambda o: f"{_knowledge(o)}Question: {o.question}", allowed=("answer", "retrieve"),
    fallback="retrieve",
    shot=("Known so far:\n- What is the capital of Austria? -> Vienna\n\n"
          "Question: Which river flows through Vienna?", "<decision>retrieve</decision>"))

APEX_QUERY = Role(
    name="apex_query",
    instruction=("Write one search query that finds what the question still needs. If queries were "
                 "already tried, use different keywords or another angle. Reply inside "
                 "<query></query>."),
    render=lambda o: f"{_knowledge(o)}{documents_block(o.documents)}{_tried(o)}Question: {o.question}",
    parse=parse_query, stop=("</query>",), max_new_tokens=40,
    plumbing=lambda r: f"<query>{asked_question(r)}</query>",
    shots=(("Question: Which river flows through Vienna?", "<query>Vienna river</query>"),))

APEX_CONTINUE = decision_role(
    "apex_continue",
    "Decide whether the documents gathered so far are enough to answer the question. Write "
    "<decision>stop</decision> if they are, <decision>continue</decision> to search again.",
    render=lambda o: f"{documents_block(o.documents)}Question: {o.question}",
    allowed=("continue", "stop"), fallback="stop",
    shot=("Documents:\n[0] Vienna: Vienna lies on the Danube.\n\n"
          "Question: Which river flows through Vienna?", "<decision>stop</decision>"))

APEX_SUB_ANSWER = Role(
    name="apex_answer",
    instruction=("Answer the question in a few words from what is known and the documents. Always "
                 "give your best answer. Reply inside <answer></answer>."),
    render=lambda o: f"{_knowledge(o)}{documents_block(o.documents)}Question: {o.question}",
    parse=parse_answer, stop=("</answer>",), max_new_tokens=40,
    plumbing=lambda r: f"<answer>{first_title(user_content(r))}</answer>",
    shots=(("Documents:\n[0] Vienna: Vienna lies on the Danube.\n\n"
            "Question: Which river flows through Vienna?", "<answer>the Danube</answer>"),))

APEX_FINAL = Role(
    name="apex_final",
    instruction=("Answer the original question in a few words from the answers to its sub-questions. "
                 "Commit to the most likely answer. Reply inside <answer></answer>."),
    render=lambda o: f"{_knowledge(o)}Original question: {o.question}",
    parse=parse_answer, stop=("</answer>",), max_new_tokens=40, plumbing="<answer>I don’t know</answer>",
    shots=(("Known so far:\n- What is the capital of Austria? -> Vienna\n- Which river flows through "
            "Vienna? -> the Danube\n\nOriginal question: Which river flows through the capital of "
            "Austria?", "<answer>the Danube</answer>"),))

