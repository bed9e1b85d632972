"""How a planner's workflow is settled beyond the words it writes (``Settings.planning``), read
only by methods whose planner picks workflows (JADE, MAO-ARAG), so the general ``Settings``
carries one field for them:

- ``fallback``: the workflow that runs when the planner's reply is unusable ("" = none: a broken
  plan answers nothing, which training uses so a broken plan cannot borrow the fallback's answer);
- ``choices``: a menu of workflows the planner chooses among by its likelihood of each reply
  (``nodes.choices``); empty, it writes any workflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ragteam.nodes.option_objects import option_object
from ragteam.nodes.topology import FormatViolation, parse_topology


@dataclass(frozen=True)
class Planning:
    """The planner's ``fallback`` workflow and its menu of ``choices`` (the module docstring)."""

    fallback: str = "RA,AG"
    choices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.fallback, str):
            raise ValueError(f"planning.fallback must be a workflow string, got {self.fallback!r}"[:200])
        if self.fallback and isinstance(parsed := parse_topology(self.fallback), FormatViolation):
            raise ValueError(f"planning.fallback {self.fallback!r}: {parsed.reason}"[:300])
        object.__setattr__(self, "choices", _workflows("planning.choices", self.choices))

    @classmethod
    def of(cls, value: "Planning | Mapping | None") -> "Planning":
        """``value`` as planning options: itself, or from a JSON object (Studio, a config file)."""
        return option_object(cls, value, "planning")


def _workflows(name: str, value) -> tuple[str, ...]:
    """``value`` (a list from JSON, a tuple from Python) as distinct parseable workflows."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(w, str) for w in value):
        raise ValueError(f"{name} must be a list of workflow strings, got {value!r}"[:200])
    for workflow in value:
        if isinstance(parsed := parse_topology(workflow), FormatViolation):
            raise ValueError(f"{name}: {workflow!r}: {parsed.reason}"[:300])
    if len(set(value)) != len(value):
        raise ValueError(f"{name} lists a workflow twice: {list(value)!r}"[:200])
    return tuple(value)
