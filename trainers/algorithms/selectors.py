"""SFT target selectors, registered by name (``sft_graph.py --select NAME[=ARG]``).

By default a fine-tune learns the calls of runs that scored well (``sft.successful_transitions``,
or per question the best workflow of an exploration, ``sft.best_workflow_transitions``). A
selector picks the calls of some roles by a rule of its own instead, such as evidence, and
*claims* them: the score rule then leaves the calls it claims alone, so no call is taught twice.

A selector takes a ``Selection`` (the folders, the roles being trained, the tokenizer, the score
threshold and its own ``--select NAME=ARG`` argument) and returns ``Selected`` (the calls, counts
for the report, and its claim). Add one with ``@register_selector("name", roles=...)``; a study's
own selectors live beside its configs in a file of their own (``--selectors FILE.py``, e.g.
``examples/research/phantomwiki/phantomwiki_selectors.py``), registered when the file is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Sequence

from ragteam.trainers.algorithms import sft
from ragteam.trainers.algorithms.sft import Claim

if TYPE_CHECKING:
    from ragteam.trainers.experience import Experience


@dataclass(frozen=True)
class Selection:
    """What every selector is given."""

    folders: tuple[Path, ...]              # the --traces folders, or the --explore ones
    explored: bool                         # folders are `ragteam headroom` OUT/top<k> ones
    roles: frozenset[str] | None           # the roles being trained (None: every role)
    tokenizer: Any
    min_f1: float
    argument: str | None = None            # ARG of --select NAME=ARG

    def trains(self, roles: Collection[str]) -> bool:
        """Whether any of ``roles`` is being trained."""
        return self.roles is None or bool(self.roles & set(roles))


@dataclass
class Selected:
    items: list["Experience"] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    claims: Claim = lambda t, record: False


@dataclass(frozen=True)
class Selector:
    name: str
    select: Callable[[Selection], Selected]
    roles: frozenset[str]          # the roles whose calls it may claim (two selectors never share one)
    argument: str | None           # what its ARG is ("FILE", "DATA"…); None: it takes none
    required: bool                 # the ARG must be given
    explored_only: bool            # it reads an exploration's candidates (--explore)
    help: str


SELECTORS: dict[str, Selector] = {}


def register_selector(name: str, roles: Collection[str], argument: str | None = None, required: bool = False,
                      explored_only: bool = False):
    """Register ``fn(selection) -> Selected`` under ``name``; its docstring's first line is its
    help. ``roles``: the roles whose calls it may claim."""
    def wrap(fn: Callable[[Selection], Selected]) -> Callable[[Selection], Selected]:
        summary = (fn.__doc__ or "").strip().split("\n\n")[0]
        SELECTORS[name] = Selector(name, fn, frozenset(roles), argument, required, explored_only,
                                   " ".join(summary.split()))
        return fn
    return wrap


def load_selectors(path: str | Path) -> None:
    """Import a file of ``@register_selector`` definitions (a study's own selectors)."""
    from ragteam.nodes.user_modules import import_user_module

    if not str(path).endswith(".py"):
        raise ValueError(f"--selectors {path}: expected a .py file that registers selectors")
    import_user_module(str(path), str(path), kind="selectors")


def parse_select(spec: str, explored: bool) -> tuple[Selector, str | None]:
    """``NAME`` or ``NAME=ARG`` as (its registered selector, ARG), checked against what the
    selector takes; a ``ValueError`` naming the known ones otherwise."""
    name, has_argument, argument = spec.partition("=")
    selector = SELECTORS.get(name)
    if selector is None:
        raise ValueError(f"--select {spec}: no selector {name!r}; known: {', '.join(sorted(SELECTORS))} "
                         "(a study's own: --selectors FILE.py)")
    if has_argument and selector.argument is None:
        raise ValueError(f"--select {spec}: {name} takes no argument")
    if selector.required and not argument:
        raise ValueError(f"--select {spec}: give {name}={selector.argument}")
    if selector.explored_only and not explored:
        raise ValueError(f"--select {spec}: {name} chooses among explored workflows; give --explore")
    return selector, argument or None


def checked_selectors(specs: Sequence[str], explored: bool) -> list[tuple[Selector, str | None]]:
    """Every ``--select`` parsed; two that claim the same role are refused (one rule a role)."""
    chosen = [parse_select(spec, explored) for spec in specs]
    for i, (first, _) in enumerate(chosen):
        for second, _ in chosen[i + 1:]:
            shared = first.roles & second.roles
            if shared:
                raise ValueError(f"--select {first.name} and {second.name} both choose the calls of "
                                 f"{', '.join(sorted(shared))}; choose one")
    return chosen


def run_selectors(chosen: Sequence[tuple[Selector, str | None]], selection: Selection) -> Selected:
    """The selectors' calls and counts (each count under the selector's name) and their joint claim."""
    found = Selected()
    claims: list[Claim] = []
    for selector, argument in chosen:
        found_here = selector.select(replace(selection, argument=argument))
        found.items += found_here.items
        found.counts.update({f"{selector.name}/{key}": n for key, n in found_here.counts.items()})
        claims.append(found_here.claims)
    found.claims = lambda t, record: any(claim(t, record) for claim in claims)
    return found


# -- the library's selectors ------------------------------------------------------------------------
@register_selector("hindsight-answers", roles={"AG"})
def hindsight_answers(selection: Selection) -> Selected:
    """The answer generator's calls on the whole question, by evidence instead of score: wherever
    its documents held every gold answer, it learns to give them all (a reader naming one of
    five friends never scores well enough to be shown a list). Training questions only.

    Its calls on sub-questions are still selected by score."""
    if not selection.trains({"AG"}):
        return Selected(claims=sft.answers_whole_question)
    items, counts = sft.hindsight_answer_transitions(selection.folders, selection.tokenizer,
                                                     roles=selection.roles)
    return Selected(items, counts, sft.answers_whole_question)


@register_selector("hindsight-answers-only", roles={"AG", "AS"})
def hindsight_answers_only(selection: Selection) -> Selected:
    """As hindsight-answers, with the answer summarizer's final answers by evidence too, and no
    answer (not even one to a sub-question) selected by score: on shared weights an untrained
    reader's one-name answers outweighed the lists evidence teaches."""
    if not selection.trains({"AG", "AS"}):
        return Selected(claims=sft.gives_an_answer)
    items, counts = sft.hindsight_answer_transitions(selection.folders, selection.tokenizer, summaries=True,
                                                     roles=selection.roles)
    return Selected(items, counts, sft.gives_an_answer)


@register_selector("planner-by-type", roles={"planner"}, argument="DATA", required=True, explored_only=True)
def planner_by_type(selection: Selection) -> Selected:
    """The planner learns per question type (metadata.type of DATA, the questions explored, such
    as PhantomWiki's hops-N): every question of a type asks for the fixed workflow with the best
    mean F1 on that type, whatever this question's run scored.

    A planner that sees only the question can at best learn what pays on questions of its shape."""
    from ragteam.graphs.eval.headroom import question_types
    from ragteam.stores.datasets import read_dataset

    claims = lambda t, record: t.role == "planner"  # noqa: E731
    if not selection.trains({"planner"}):
        return Selected(claims=claims)
    types = question_types(read_dataset(selection.argument).examples)
    items, counts = sft.planner_workflow_transitions(
        selection.folders, selection.tokenizer,
        lambda root, candidates, records: sft.planner_targets_by_type(root, candidates, records, types))
    return Selected(items, counts, claims)
