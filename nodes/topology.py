"""The workflow topology language the planner speaks.

Grammar (whitespace is ignored, role names are case-insensitive):

    workflow := step (SEP step)*
    step     := ROLE | group
    group    := "[" branch ("|" branch)+ "]"      parallel retrieval paths, joined afterwards
    branch   := ROLE (SEP ROLE)*
    SEP      := "," | "->" | "→"
    ROLE     := QR | RA | DS | AG | QDS | QDP     (alias: R = RA)

Examples: ``RA,AG``, ``QR,RA,DS,AG``, ``R,DS,AG``, ``QDS``, ``QDP``, ``[RA|QR,RA],DS,AG``.

Rules (JADE / MAO-ARAG): a decomposition (QDS or QDP) stands alone; otherwise the workflow solves
the query and ends with its only AG; DS needs retrieval before it; no role repeats along a path.
A parallel group fans out retrieval paths, so its branches hold only QR and RA, each branch
retrieves, and the branches' documents are merged at the join.

``parse_topology`` never raises on any input: it returns a ``Topology`` or a ``FormatViolation``.
Parsing and validation are linear in the text, and text over ``MAX_WORKFLOW_CHARS`` is refused
before it is read (a real workflow has at most a few dozen characters).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

SOLVING_ROLES = ("QR", "RA", "DS", "AG")
DECOMPOSITION_ROLES = ("QDS", "QDP")
ALIASES = {"R": "RA"}
BRANCH_ROLES = ("QR", "RA")

MAX_WORKFLOW_CHARS = 200

_TOKEN = re.compile(r"\s*(->|→|[\[\]|,]|[A-Za-z]+)")


@dataclass(frozen=True)
class Parallel:
    branches: tuple[tuple[str, ...], ...]

    def __str__(self) -> str:
        return "[" + "|".join(",".join(branch) for branch in self.branches) + "]"


Step = Union[str, Parallel]


@dataclass(frozen=True)
class Topology:
    steps: tuple[Step, ...]

    def __str__(self) -> str:
        return ",".join(str(step) for step in self.steps)

    @property
    def decomposition(self) -> str | None:
        """"QDS" or "QDP" for a decomposition workflow, None for a solving one."""
        first = self.steps[0]
        return first if first in DECOMPOSITION_ROLES else None

    def roles(self) -> list[str]:
        """Every role occurrence, in execution order (branches left to right)."""
        found: list[str] = []
        for step in self.steps:
            if isinstance(step, Parallel):
                found.extend(role for branch in step.branches for role in branch)
            else:
                found.append(step)
        return found


@dataclass(frozen=True)
class FormatViolation:
    reason: str
    text: str = ""

    def __bool__(self) -> bool:  # so `if topology:` reads naturally
        return False


class _SyntaxProblem(Exception):
    pass


def parse_topology(text: str, allow_decomposition: bool = True) -> Topology | FormatViolation:
    """A workflow string (``QR,RA,DS,AG``, ``[RA|QR,RA],DS,AG``, ``QDS``…) as a validated
    ``Topology``, or a ``FormatViolation`` with the reason; never raises on bad text."""
    if not isinstance(text, str) or not text.strip():
        return FormatViolation("empty workflow", str(text)[:MAX_WORKFLOW_CHARS])
    if len(text) > MAX_WORKFLOW_CHARS:
        return FormatViolation(f"workflow longer than {MAX_WORKFLOW_CHARS} characters",
                               text[:MAX_WORKFLOW_CHARS])
    try:
        topology = _Parser(_tokens(text)).workflow()
    except _SyntaxProblem as problem:
        return FormatViolation(str(problem), text)
    problem = check_rules(topology, allow_decomposition)
    return FormatViolation(problem, text) if problem else topology


def checked_workflow(workflow: str) -> str:
    """``workflow`` when it parses as a topology, else a ``ValueError`` with the parser's reason."""
    parsed = parse_topology(workflow)
    if isinstance(parsed, FormatViolation):
        raise ValueError(f"{workflow!r} is not a workflow: {parsed.reason}")
    return workflow


def normalize(text: str) -> str | None:
    """Canonical spelling of a valid workflow (the compiler's cache key), None if invalid."""
    topology = parse_topology(text)
    return str(topology) if isinstance(topology, Topology) else None


def _tokens(text: str) -> list[str]:
    tokens, pos, text = [], 0, text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            raise _SyntaxProblem(f"unexpected character {text[pos]!r} at position {pos}")
        token = match.group(1)
        tokens.append("," if token in ("->", "→") else token)
        pos = match.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[str]):
        self.tokens, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise _SyntaxProblem("workflow ends unexpectedly")
        self.i += 1
        return token

    def workflow(self) -> Topology:
        steps = [self.step()]
        while self.peek() == ",":
            self.take()
            steps.append(self.step())
        if self.peek() is not None:
            raise _SyntaxProblem(f"unexpected {self.peek()!r} after step {len(steps)}")
        return Topology(tuple(steps))

    def step(self) -> Step:
        if self.peek() == "[":
            return self.group()
        return self.role()

    def group(self) -> Parallel:
        self.take()
        branches = [self.branch()]
        while self.peek() == "|":
            self.take()
            branches.append(self.branch())
        if self.peek() != "]":
            raise _SyntaxProblem("a parallel group must close with ]")
        self.take()
        return Parallel(tuple(branches))

    def branch(self) -> tuple[str, ...]:
        roles = [self.role()]
        while self.peek() == ",":
            self.take()
            roles.append(self.role())
        return tuple(roles)

    def role(self) -> str:
        token = self.take()
        name = ALIASES.get(token.upper(), token.upper())
        if name not in SOLVING_ROLES + DECOMPOSITION_ROLES:
            raise _SyntaxProblem(f"unknown role {token!r}")
        return name


def check_rules(topology: Topology, allow_decomposition: bool = True) -> str:
    """The first rule the topology breaks, or "" if it is valid."""
    roles = topology.roles()
    decomposers = [r for r in roles if r in DECOMPOSITION_ROLES]
    if decomposers:
        if len(roles) > 1:
            return f"{decomposers[0]} must stand alone in a workflow"
        return "" if allow_decomposition else "decomposition is not allowed at this depth"
    if topology.steps[-1] != "AG":
        return "a solving workflow must end with AG"
    if sum(role == "AG" for role in roles) > 1:
        return "AG may appear only once"
    retrieved = False
    seen: set[str] = set()
    for step in topology.steps:
        if isinstance(step, Parallel):
            problem = _check_group(step, seen)
            if problem:
                return problem
            retrieved = True
            continue
        if step in seen:
            return f"{step} appears twice"
        if step == "DS" and not retrieved:
            return "DS needs RA before it"
        seen.add(step)
        retrieved = retrieved or step == "RA"
    return ""


def _check_group(group: Parallel, before: set[str]) -> str:
    if len(group.branches) < 2:
        return "a parallel group needs at least two branches"
    if len(set(group.branches)) < len(group.branches):
        return "parallel branches must differ"
    for branch in group.branches:
        outsiders = [r for r in branch if r not in BRANCH_ROLES]
        if outsiders:
            return f"{outsiders[0]} cannot run inside a parallel group (only QR and RA can)"
        if "RA" not in branch:
            return "every parallel branch must retrieve (contain RA)"
        on_path = set(before)
        for role in branch:
            if role in on_path:
                return f"{role} appears twice on one path"
            on_path.add(role)
    return ""
