"""M-ASK's five agents: planning, search, summary, update and answer.

They share one knowledge state: the question, a thinking trajectory of ⟨sub-question, sub-answer⟩
steps τ1…τn, and the current predicted answer. The update agent edits that trajectory in place
(``<Update>t2</Update>`` overwrites τ2) or extends it (``<Add>t3</Add>``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragteam.nodes.parsing import MAX_DIGITS, Parsed, numbered_tags, tag_content, tagged_text
from ragteam.nodes.policies.scripted import asked_question, first_title, user_content
from ragteam.nodes.roles.base import Role, documents_block
from ragteam.stores.documents import Document

NO_EVIDENCE = "No useful information"

# One worked example shared by the demonstrations below.
_Q = "Which river flows through the capital of Austria?"
_T0 = "t1: What is the capital of Austria? -> Vienna\nt2: Which river flows through Vienna? -> unknown"
_T1 = "t1: What is the capital of Austria? -> Vienna\nt2: Which river flows through Vienna? -> the Danube"


@dataclass(frozen=True)
class KnowledgeObservation:
    question: str
    trajectory: tuple[tuple[str, str], ...] = ()
    predicted: str = ""
    history: tuple[tuple[str, str], ...] = ()   # searches so far: (query, evidence)
    query: str = ""                             # the sub-query being processed
    evidence: str = ""
    documents: tuple[Document, ...] = ()


def trajectory_text(trajectory) -> str:
    if not trajectory:
        return "(empty)"
    return "\n".join(f"t{i}: {q} -> {a}" for i, (q, a) in enumerate(trajectory, 1))


def _history_text(history) -> str:
    return "\n".join(f"- {q} -> {e}" for q, e in history) if history else "(none)"


# -- parsers -------------------------------------------------------------------------------------
def parse_plan(text: str, obs: KnowledgeObservation) -> Parsed:
    questions, answers = numbered_tags(text, "q"), numbered_tags(text, "a")
    trajectory = [[q, answers[i] if i < len(answers) else "unknown"] for i, q in enumerate(questions)]
    predicted = tag_content(text, "predicted_answer")
    action = {"trajectory": trajectory, "predicted": predicted or ""}
    if not trajectory:
        return Parsed.violation("no <q1>/<a1> steps", fallback=action)
    if predicted is None:
        return Parsed.violation("no <predicted_answer>", fallback=action)
    return Parsed(action)


def parse_search(text: str, obs: KnowledgeObservation) -> Parsed:
    query = tag_content(text, "search")
    if query:
        return Parsed({"search": query})
    if re.search(r"<end\s*/?>", text, flags=re.I):
        return Parsed({"end": True})
    return Parsed.violation("neither <search>…</search> nor <end>", fallback={"end": True})


parse_evidence = tagged_text("evidence", default=NO_EVIDENCE, limit=300)


def parse_update(text: str, obs: KnowledgeObservation) -> Parsed:
    target = tag_content(text, "Update")
    if target is not None:
        match = re.fullmatch(rf"t?(\d{{1,{MAX_DIGITS}}})", target.strip(), flags=re.I)
        if match and 1 <= int(match.group(1)) <= len(obs.trajectory):
            return Parsed({"op": "update", "index": int(match.group(1)) - 1})
        return Parsed.violation(f"<Update> names no existing step: {target[:40]!r}", fallback={"op": "add"})
    if tag_content(text, "Add") is not None:
        return Parsed({"op": "add"})
    return Parsed.violation("neither <Update>ti</Update> nor <Add>", fallback={"op": "add"})


parse_predicted = tagged_text("predicted_answer", default=lambda obs: obs.predicted)


# -- roles ---------------------------------------------------------------------------------------
M_ASK_PLAN = Role(
    name="m_ask_plan",
    instruction=("Work out the question from your own knowledge, without searching. Split it into "
                 "sub-questions and answer each one; write unknown when you do not know. Write them "
                 "as <q1>sub-question</q1><a1>answer</a1>, <q2>…</q2><a2>…</a2> and so on, then give "
                 "your best final answer in a few words inside <predicted_answer></predicted_answer>."),
    render=lambda o: f"Question: {o.question}", parse=parse_plan, stop=("</predicted_answer>",),
    max_new_tokens=160,
    plumbing=lambda r: f"<q1>{asked_question(r)}</q1><a1>unknown</a1><predicted_answer>unknown</predicted_answer>",
    shots=((f"Question: {_Q}", "<q1>What is the capital of Austria?</q1><a1>Vienna</a1><q2>Which river "
            "flows through Vienna?</q2><a2>unknown</a2><predicted_answer>unknown</predicted_answer>"),))

M_ASK_SEARCH = Role(
    name="m_ask_search",
    instruction=("You decide whether more searching is needed to answer a question. Look at the "
                 "thinking trajectory: if a step is unknown or doubtful, or a needed step is missing, "
                 "write one new search query that differs from every earlier search, as "
                 "<search>query</search>. If nothing more is needed, write <end>. Write nothing else."),
    render=lambda o: (f"Question: {o.question}\nThinking trajectory:\n{trajectory_text(o.trajectory)}\n"
                      f"Earlier searches:\n{_history_text(o.history)}"),
    parse=parse_search, stop=("</search>", "<end>"), max_new_tokens=40,
    plumbing=lambda r: (f"<search>{asked_question(r)}</search>"
                        if "Earlier searches:\n(none)" in user_content(r) else "<end>"),
    shots=((f"Question: {_Q}\nThinking trajectory:\n{_T0}\nEarlier searches:\n(none)",
            "<search>river through Vienna</search>"),
           (f"Question: {_Q}\nThinking trajectory:\n{_T1}\nEarlier searches:\n"
            "- river through Vienna -> Vienna lies on the Danube.", "<end>")))

M_ASK_SUMMARY = Role(
    name="m_ask_summary",
    instruction=("Extract from the documents the evidence that answers the search query, in one or "
                 f"two sentences, inside <evidence></evidence>. If there is none, write "
                 f"<evidence>{NO_EVIDENCE}</evidence>."),
    render=lambda o: f"{documents_block(o.documents)}Search query: {o.query}",
    parse=parse_evidence, stop=("</evidence>",), max_new_tokens=80,
    plumbing=lambda r: f"<evidence>{first_title(user_content(r))}</evidence>",
    shots=(("Documents:\n[0] Vienna: Vienna is the capital of Austria and lies on the Danube.\n\n"
            "Search query: river through Vienna", "<evidence>Vienna lies on the Danube.</evidence>"),))

M_ASK_UPDATE = Role(
    name="m_ask_update",
    instruction=("A search produced new evidence. Decide how it enters the thinking trajectory: if it "
                 "replaces or corrects an existing step ti, write <Update>ti</Update>; if it adds "
                 "information no step holds, write <Add>t(n+1)</Add> where n is the number of steps. "
                 "Write only that tag."),
    render=lambda o: (f"Question: {o.question}\nThinking trajectory:\n{trajectory_text(o.trajectory)}\n"
                      f"Predicted answer: {o.predicted or '(none)'}\nNew query: {o.query}\n"
                      f"Evidence: {o.evidence}"),
    parse=parse_update, stop=("</Update>", "</Add>"), max_new_tokens=16, plumbing="<Add>t2</Add>",
    shots=((f"Question: {_Q}\nThinking trajectory:\n{_T0}\nPredicted answer: unknown\n"
            "New query: river through Vienna\nEvidence: Vienna lies on the Danube.", "<Update>t2</Update>"),))

M_ASK_ANSWER = Role(
    name="m_ask_answer",
    instruction=("Answer the question from the thinking trajectory's answers, in a few words, inside "
                 "<predicted_answer></predicted_answer>. No reasoning, no other text."),
    render=lambda o: f"Question: {o.question}\nThinking trajectory:\n{trajectory_text(o.trajectory)}",
    parse=parse_predicted, stop=("</predicted_answer>",), max_new_tokens=40,
    plumbing=lambda r: "<predicted_answer>{}</predicted_answer>".format(
        user_content(r).rsplit(" -> ", 1)[-1].strip() if " -> " in user_content(r) else "unknown"),
    shots=((f"Question: {_Q}\nThinking trajectory:\n{_T1}",
            "<predicted_answer>the Danube</predicted_answer>"),))
