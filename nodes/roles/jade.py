"""The workflow roles JADE's planner composes (and MAO-ARAG and the fixed baselines reuse):
planner, QR, QDS, QDP, DS, AG and AS. RA is not here: retrieval is a tool node, not an LLM call."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from ragteam.nodes.parsing import Parsed, numbered_tags, numbers, references, tag_content, tagged_text
from ragteam.nodes.policies.scripted import asked_question, first_title, user_content
from ragteam.nodes.roles.base import Observation, Role, documents_block, pairs_block
from ragteam.nodes.topology import Topology, parse_topology


def _known_block(observation: Observation) -> str:
    return pairs_block("Already established", observation.known)


def _question_only(observation: Observation) -> str:
    return f"{_known_block(observation)}Question: {observation.query}"


def _question_with_documents(observation: Observation) -> str:
    return f"{_known_block(observation)}{documents_block(observation.documents)}Question: {observation.query}"


# -- parsers -------------------------------------------------------------------------------------
def parse_workflow(text: str, observation: Observation) -> Parsed:
    """The planner's reply → a validated ``Topology``; on any violation the action is None and
    the runtime substitutes the configured fallback workflow."""
    content = tag_content(text, "workflow")
    if not content:
        return Parsed.violation("no <workflow> tag", fallback=None)
    topology = parse_topology(content, allow_decomposition=observation.allow_decomposition)
    if isinstance(topology, Topology):
        return Parsed(topology)
    return Parsed.violation(f"{topology.reason} in {content[:200]!r}", fallback=None)


def workflow_reply(workflow: str) -> str:
    """A planner reply asking for ``workflow``, as the demonstrations write one."""
    return f"<workflow>{workflow}</workflow>"


def answer_reply(answers: Sequence[str]) -> str:
    """An answer generator's reply giving ``answers``, as its instruction asks for several."""
    return f"<answer>{', '.join(answers)}</answer>"


def subquestions_reply(subquestions: Sequence[str]) -> str:
    """A decomposer's reply writing ``subquestions``, one per line, as its examples do."""
    return "\n".join(f"<q{n}>{q}</q{n}>" for n, q in enumerate(subquestions, 1))


def parse_query(text: str, observation: Observation) -> Parsed:
    content = tag_content(text, "query")
    if not content:
        return Parsed.violation("no <query> tag", fallback=observation.query)
    return Parsed(content)


def _unresolvable_reference(subquestions: list[str], serial: bool) -> tuple[int, str] | None:
    """(index, reason) of the first sub-question naming an answer it cannot have; None when all
    can. A serial sub-question is asked once the earlier ones are answered, so it may name #1 up
    to its own number less one; parallel ones are answered together, so they may name none.
    Such a reference would reach the retriever as the literal text "#3"."""
    for index, subquestion in enumerate(subquestions):
        for n in references(subquestion):
            if not serial:
                return index, f"sub-question {index + 1} refers to #{n}, but parallel sub-questions are answered together"
            if not 1 <= n <= index:
                return index, f"sub-question {index + 1} refers to #{n}, which is not an earlier sub-question"
    return None


def _subquestions_parser(serial: bool) -> Callable[[str, Observation], Parsed]:
    """The decomposer's reply → its sub-questions (de-duplicated, order kept). Too many are cut to
    the limit; from the first one with an unresolvable reference on they are dropped (or the
    whole split, when fewer than two would remain): each a violation with what is still usable."""
    def parse(text: str, observation: Observation) -> Parsed:
        found = list(dict.fromkeys(numbered_tags(text, "q")))
        if len(found) < 2:
            return Parsed.violation(f"expected at least 2 <qN> sub-questions, found {len(found)}",
                                    fallback=[])
        reasons = []
        if len(found) > observation.max_items:
            reasons.append(f"{len(found)} sub-questions exceed the limit of {observation.max_items}")
            found = found[: observation.max_items]
        if (unresolvable := _unresolvable_reference(found, serial)) is not None:
            index, reason = unresolvable
            reasons.append(reason)
            found = found[:index] if index >= 2 else []
        return Parsed.violation("; ".join(reasons), fallback=found) if reasons else Parsed(found)
    return parse


parse_serial_subquestions = _subquestions_parser(serial=True)
parse_parallel_subquestions = _subquestions_parser(serial=False)


def parse_document_ids(text: str, observation: Observation) -> Parsed:
    everything = list(range(len(observation.documents)))
    content = tag_content(text, "id")
    if content is None:
        return Parsed.violation("no <id> tag", fallback=everything)
    named = numbers(content)
    chosen = list(dict.fromkeys(n for n in named if 0 <= n < len(observation.documents)))
    if not chosen and any(c.isdigit() for c in content):  # ids given, none of them usable
        return Parsed.violation("no selected id names a document", fallback=everything)
    return Parsed(chosen)


parse_answer = tagged_text("answer", default="I don't know")

# Some questions have a whole set of answers (PhantomWiki: "Who is the friend of X?" means every
# friend), scored as a set: the answer roles are told to list them, in the comma-separated form
# the set metric splits (graphs.eval.metrics.answer_items). parse_answer keeps the list whole.
SEVERAL_ANSWERS = "If there are several answers, give them all, separated by commas."


# -- the roles -------------------------------------------------------------------------------------
_PLANNER_AGENTS = """Agents you can use:
- QR (query rewriter): turns the question into a short search query.
- RA (retriever, also written R): fetches candidate documents for the query.
- DS (document selector): keeps only the retrieved documents that help; RA must come before it.
- AG (answer generator): answers from the question and any documents; it always comes last.
"""
_PLANNER_DECOMPOSERS = """- QDS (serial decomposition): splits the question into sub-questions answered in order, where later ones use earlier answers.
- QDP (parallel decomposition): splits the question into independent sub-questions.
"""
_PLANNER_RULES = """Rules: list solving agents separated by commas and end with AG, for example RA,AG or QR,RA,DS,AG. Retrieval paths may run side by side in brackets separated by |, for example [RA|QR,RA],DS,AG."""
_PLANNER_DECOMPOSE_RULE = """ A question that needs several facts may instead be decomposed: then the plan is QDS alone or QDP alone."""
_PLANNER_TAIL = """
Reply with only the plan inside <workflow></workflow> tags."""


def _planner_instruction(observation: Observation) -> str:
    head = "You plan which agents a retrieval team uses to answer a question.\n"
    if observation.allow_decomposition:
        return head + _PLANNER_AGENTS + _PLANNER_DECOMPOSERS + _PLANNER_RULES + _PLANNER_DECOMPOSE_RULE + _PLANNER_TAIL
    return head + _PLANNER_AGENTS + _PLANNER_RULES + " This question must be solved directly." + _PLANNER_TAIL


def _decomposer_instruction(kind: str) -> Callable[[Observation], str]:
    def instruction(observation: Observation) -> str:
        n = observation.max_items
        if kind == "serial":
            body = (f"Break the question into at most {n} sub-questions that must be answered in order. "
                    "A later sub-question may refer to the answer of an earlier one as #1, #2 and so on.")
        else:
            body = (f"Break the question into at most {n} independent sub-questions that can each be "
                    "searched on its own, with no overlap between them.")
        return (f"{body} Every sub-question must be specific and searchable. Reply with one per line "
                "as <q1>...</q1>, <q2>...</q2> and so on.")
    return instruction


# A 135M model is sensitive to the exact examples; this set was the best of those tried
# (benchmarks/bench_format.py measures compliance). Where decomposition is not allowed, the
# planner sees no decomposing example.
_PLANNER_SHOTS = (("Question: Who wrote Hamlet?", "<workflow>RA,AG</workflow>"),
                  ("Question: Which city hosted the Olympics in the year the Eiffel Tower opened?",
                   "<workflow>QDS</workflow>"),
                  ("Question: When was the Statue of Liberty dedicated?",
                   "<workflow>QR,RA,DS,AG</workflow>"))
_SOLVING_SHOTS = tuple(shot for shot in _PLANNER_SHOTS if "QD" not in shot[1])

PLANNER = Role(
    name="planner", instruction="", instruction_for=_planner_instruction, render=_question_only,
    parse=parse_workflow, stop=("</workflow>",), max_new_tokens=24, plumbing="<workflow>RA,AG</workflow>",
    shots_for=lambda o: _PLANNER_SHOTS if o.allow_decomposition else _SOLVING_SHOTS)

QR = Role(
    name="QR",
    instruction=("Rewrite the question as one short search-engine query. Keep every name, date and "
                 "key term; add nothing else. Reply inside <query></query> tags."),
    render=_question_only, parse=parse_query, stop=("</query>",), max_new_tokens=40, sees_known=True,
    plumbing=lambda r: f"<query>{asked_question(r)}</query>",
    shots=(("Question: in what year did the famous tower in Paris open?",
            "<query>Eiffel Tower opening year</query>"),))

# The serial decomposer's example chains, by steps. Its own is the two-step one; a small model
# copies its example's length whatever the question (a probe: 40 of 40 two-step decompositions
# with this example, 40 of 40 three-step ones with a three-step example added), so exploration
# shows it the others (``serial_decomposer``, ``Settings.serial.example_steps``) to sample other lengths. An earlier
# 3-step chain ending "In which country was #2 born?" had that step copied into 46 of 200
# PhantomWiki decompositions, where no article tells a birthplace: this one's steps are relations.
SERIAL_EXAMPLES = {
    2: ("Question: Which river flows through the capital of Austria?",
        "<q1>What is the capital of Austria?</q1>\n<q2>Which river flows through #1?</q2>"),
    3: ("Question: Who was the manager of the band of the singer of Bohemian Rhapsody?",
        "<q1>Who sang Bohemian Rhapsody?</q1>\n<q2>Which band did #1 sing in?</q2>\n<q3>Who was the manager of #2?</q3>"),
    4: ("Question: What is the capital of the country where the author of the novel behind the film "
        "Jurassic Park was born?",
        "<q1>Which novel is the film Jurassic Park based on?</q1>\n<q2>Who wrote #1?</q2>\n"
        "<q3>In which country was #2 born?</q3>\n<q4>What is the capital of #3?</q4>"),
}
OWN_SERIAL_STEPS = 2


# The decomposers' plumbing: the smallest valid split (two sub-questions; the serial one refers to
# the first answer), so a fixed QDS or QDP workflow runs end to end on the scripted policy.
QDS = Role(
    name="QDS", instruction="", instruction_for=_decomposer_instruction("serial"),
    render=_question_only, parse=parse_serial_subquestions, max_new_tokens=120, sees_known=True,
    plumbing=lambda r: f"<q1>{asked_question(r)}</q1>\n<q2>Who or what is #1?</q2>",
    shots=(SERIAL_EXAMPLES[OWN_SERIAL_STEPS],))



def serial_decomposer(example_steps: int = 0) -> Role:
    """The serial decomposer, or its variant shown the example chain of ``example_steps`` steps
    (0 or its own: ``QDS`` itself). Same name, parser and instruction: only the example differs."""
    if example_steps in (0, OWN_SERIAL_STEPS):
        return QDS
    return _SERIAL_VARIANTS[example_steps]


QDP = Role(
    name="QDP", instruction="", instruction_for=_decomposer_instruction("parallel"),
    render=_question_only, parse=parse_parallel_subquestions, max_new_tokens=120, sees_known=True,
    plumbing=lambda r: f"<q1>{asked_question(r)}</q1>\n<q2>What else is known about: {asked_question(r)}</q2>",
    shots=(("Question: Are the Louvre and the Prado in the same country?",
            "<q1>In which country is the Louvre?</q1>\n<q2>In which country is the Prado?</q2>"),))

DS = Role(
    name="DS",
    instruction=("Decide which of the numbered documents help answer the question. Reply with their "
                 "numbers, comma-separated, inside <id></id> tags, for example <id>0, 2</id>."),
    render=_question_with_documents, parse=parse_document_ids, stop=("</id>",), max_new_tokens=24,
    plumbing="<id>0</id>",
    shots=(("Documents:\n[0] Rome: Rome is the capital of Italy.\n[1] Paris: Paris is the capital of "
            "France.\n[2] Lyon: Lyon is a city in France.\n\nQuestion: What is the capital of France?",
            "<id>1</id>"),
           ("Documents:\n[0] Vienna: Vienna lies on the Danube.\n[1] Danube: The Danube is Europe's "
            "second-longest river.\n\nQuestion: Which river flows through Vienna?", "<id>0, 1</id>")))

AG = Role(
    name="AG",
    instruction=("Answer the question in a few words, using the documents when they are given. If "
                 f"they do not contain the answer, say I don't know. {SEVERAL_ANSWERS} "
                 "Reply inside <answer></answer> tags."),
    render=_question_with_documents, parse=parse_answer, stop=("</answer>",), max_new_tokens=48,
    sees_known=True, plumbing=lambda r: f"<answer>{first_title(user_content(r))}</answer>",
    shots=(("Documents:\n[0] Paris: Paris is the capital and largest city of France.\n\n"
            "Question: What is the capital of France?", "<answer>Paris</answer>"),))


def _findings(observation: Observation) -> str:
    lines = "\n".join(f"{i}. {q} -> {a}" for i, (q, a) in enumerate(observation.known, 1))
    return f"Findings for its sub-questions:\n{lines or '(none)'}\n\nOriginal question: {observation.query}"


AS = Role(
    name="AS",
    instruction=("Give the final answer to the original question from the answers found for its "
                 "sub-questions. Answer in a few words and commit to the most likely answer. "
                 f"{SEVERAL_ANSWERS} Reply inside <answer></answer> tags."),
    render=_findings, parse=parse_answer, stop=("</answer>",), max_new_tokens=48, sees_known=True,
    plumbing="<answer>I don’t know</answer>",
    shots=(("Findings for its sub-questions:\n1. What is the capital of Austria? -> Vienna\n"
            "2. Which river flows through Vienna? -> the Danube\n\n"
            "Original question: Which river flows through the capital of Austria?",
            "<answer>the Danube</answer>"),))


# built once: a role is compared by identity in places (``role is QDS``), and a variant is one object
_SERIAL_VARIANTS = {steps: replace(QDS, shots=(example,)) for steps, example in SERIAL_EXAMPLES.items()}
