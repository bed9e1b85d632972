"""What a role is: data plus two functions.

A role has an instruction (system prompt), a renderer that builds the user message from its
observation, a parser that reads the reply into an action, stop strings and a token budget. The
same shared model plays every trained role; only instruction and observation differ (JADE's
parameter sharing). Each role also carries a ``plumbing`` rule: a valid reply built from the
request, so the scripted policy can drive every graph end to end without a model.

Roles are open: a role defined anywhere — here, or in a user's own file — is known by its name to
the scripted policy from the moment it is created (``plumbing_rule``), so a user's graph with a
new role runs on ``--policy scripted`` from Python, the CLI and Studio alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ragteam.nodes.parsing import Parsed
from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams
from ragteam.nodes.policies.scripted import Rule
from ragteam.stores.documents import Document
from ragteam.stores.text import clean_text

DOC_CHARS = 500  # per-document text budget in prompts; keeps 5-document prompts near 700 tokens


@dataclass(frozen=True)
class Observation:
    """o_{t,k} of the workflow roles: the target query, the round's local context, and the
    slice of global state the role may see (``known``: solved sub-questions and their answers)."""

    query: str
    documents: tuple[Document, ...] = ()
    known: tuple[tuple[str, str], ...] = ()
    max_items: int = 4                # sub-question limit for decomposition roles
    allow_decomposition: bool = True  # planner: may it choose QDS/QDP at this depth?


_PLAYABLE: dict[str, "Role"] = {}  # roles with a plumbing rule, by name; the latest definition wins
_DEFINED: set[str] = set()          # every role name defined so far (built-in and users' roles)


def defined_roles() -> set[str]:
    """The names of every role defined so far: the built-in ones once their methods are loaded,
    and a user's once their graph's module is."""
    return set(_DEFINED)


def plumbing_rule(role_name: str) -> Rule | None:
    """The plumbing rule of the role named ``role_name``, wherever it was defined (None if no
    role of that name has one)."""
    role = _PLAYABLE.get(role_name)
    return role.plumbing if role else None


@dataclass(frozen=True)
class Role:
    """One LLM role: what it is told, how it sees an observation, how its reply becomes an
    action. Observations are ``Observation`` for the workflow roles; other methods bring their own
    observation types (see the sibling modules), and so may a user's role (any object or dict).

    Fields:

    - ``name`` (str): the role's name in traces, rewards and the trainer's ``train_roles`` and
      ``frozen_roles``; the team picks the policy that plays the role by it.
    - ``instruction`` (str): the system prompt.
    - ``render`` (observation -> str): builds the user message from the observation.
    - ``parse`` ((reply, observation) -> ``Parsed``): reads the reply into an action. It must not
      raise: a broken reply is a ``Parsed.violation`` with a fallback action, which the trace
      records as a format violation (``tag_content``, ``tag_choice``, ``tagged_text`` build one).
    - ``stop`` (tuple of str): generation stops after any of these (e.g. the closing tag).
    - ``max_new_tokens`` (int, default 64): the reply's token budget.
    - ``sees_known`` (bool, default False): whether the role is shown the solved sub-questions and
      their answers (``Observation.known``); a role that does not gets them stripped.
    - ``instruction_for`` (observation -> str, optional): a system prompt that depends on the
      observation, used instead of ``instruction``.
    - ``shots`` (tuple of (user text, ideal reply)): demonstrations sent as earlier chat turns;
      small models follow the output format far more often with them (``Settings.few_shot``
      turns them off).
    - ``shots_for`` (observation -> shots, optional): demonstrations chosen per observation.
    - ``plumbing`` (``Rule``, optional): what ``--policy scripted`` replies for this role — a fixed
      string, a list replayed in order, or a function of the request — so a graph using the role
      runs end to end without a model. Without one, ``--policy scripted`` cannot play the role.
    """

    name: str
    instruction: str
    render: Callable[[Any], str]
    parse: Callable[[str, Any], Parsed]
    stop: tuple[str, ...] = ()
    max_new_tokens: int = 64
    sees_known: bool = False  # whether Select(s_t, role) passes solved answers to this role
    instruction_for: Callable[[Any], str] | None = field(default=None, repr=False)
    # Demonstrations (user text, ideal reply), sent as earlier chat turns. Small models follow
    # the output formats far more often with them (measured in the runtime issue's note).
    shots: tuple[tuple[str, str], ...] = ()
    shots_for: Callable[[Any], tuple[tuple[str, str], ...]] | None = field(default=None, repr=False)
    plumbing: Rule | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _DEFINED.add(self.name)
        if self.plumbing is not None:
            _PLAYABLE[self.name] = self

    def system_prompt(self, observation) -> str:
        """The system message for ``observation`` (the instruction, or the per-observation one)."""
        return self.instruction_for(observation) if self.instruction_for else self.instruction

    def request(self, observation, temperature: float = 0.0, prefix: str = "",
                few_shot: bool = True) -> GenerationRequest:
        """The chat request for ``observation``: system prompt, demonstrations, user message."""
        if isinstance(observation, Observation) and not self.sees_known and observation.known:
            observation = Observation(**{**observation.__dict__, "known": ()})
        shots = (self.shots_for(observation) if self.shots_for else self.shots) if few_shot else ()
        demonstrations = tuple({"role": speaker, "content": text} for user, reply in shots
                               for speaker, text in (("user", user), ("assistant", reply)))
        messages = ({"role": "system", "content": self.system_prompt(observation)}, *demonstrations,
                    {"role": "user", "content": self.render(observation)})
        # A graph invoked directly (Studio, ``graph.ainvoke``) or a user's retriever can hand a role
        # text with lone surrogates, which no tokenizer encodes: every request is cleaned here.
        messages = tuple({**m, "content": clean_text(m["content"])} for m in messages)
        return GenerationRequest(messages, SamplingParams(self.max_new_tokens, temperature, self.stop),
                                 role=self.name, prefix=clean_text(prefix))


# -- observation pieces shared by several methods ---------------------------------------------------
def pairs_block(title: str, pairs) -> str:
    """"Title:\n- q -> a" lines, or "" when there are none."""
    if not pairs:
        return ""
    return f"{title}:\n" + "\n".join(f"- {q} -> {a}" for q, a in pairs) + "\n\n"


def documents_block(documents: tuple[Document, ...]) -> str:
    """"Documents:\n[i] title: text" lines (each text cut to ``DOC_CHARS``), or "" when none."""
    lines = []
    for i, doc in enumerate(documents):
        text = doc.text if len(doc.text) <= DOC_CHARS else doc.text[:DOC_CHARS].rsplit(" ", 1)[0] + " …"
        lines.append(f"[{i}] {doc.title}: {text}" if doc.title else f"[{i}] {text}")
    return "Documents:\n" + "\n".join(lines) + "\n\n" if lines else ""
