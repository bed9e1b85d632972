"""Replies a run writes for a role instead of sampling them: the one seam behind a fixed workflow
(JADE's team with every plan written), training's workflow groups (the planner made to try each
workflow) and given decompositions (what a decomposer that wrote the right chains would reach).

``nodes.call.call_role`` asks ``WrittenReplies.reply`` before it samples: a written reply is
traced like a sampled one, marked ``written``, and trained like one (its behaviour log-probs are
the learner's π_old, since nothing was sampled). ``Settings.written`` holds a run's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from ragteam.nodes.option_objects import option_object

ROOT_TASK = "0"  # the whole question's task id (graphs.methods.task_tree.root_node)


@dataclass(frozen=True)
class WrittenReplies:
    """What a run writes instead of sampling ("" = sampled as usual):

    - ``plan``: the planner's reply for the whole question, as this workflow (``QDS``);
    - ``subplans``: its reply for every sub-question, as this workflow (``RA,AG``);
    - ``decompositions``: a file of given decompositions (``nodes.decompositions``): for a whole
      question it lists, the serial decomposer's reply is that chain.

    A fixed workflow is ``fixed(workflow, fallback)``: every plan written, none sampled."""

    plan: str = ""
    subplans: str = ""
    decompositions: str = ""

    def __post_init__(self) -> None:
        for item in fields(self):
            if not isinstance(getattr(self, item.name), str):
                raise ValueError(f"written.{item.name} must be a string, got {getattr(self, item.name)!r}"[:200])
        from ragteam.nodes.topology import FormatViolation, parse_topology

        for name in ("plan", "subplans"):
            workflow = getattr(self, name)
            if workflow and isinstance(parsed := parse_topology(workflow), FormatViolation):
                raise ValueError(f"written.{name} {workflow!r}: {parsed.reason}"[:300])

    @classmethod
    def of(cls, value: "WrittenReplies | Mapping | None") -> "WrittenReplies":
        """``value`` as written replies: itself, or from a JSON object (Studio, a config file),
        whose unknown keys are one clear error."""
        return option_object(cls, value, "written")

    @classmethod
    def fixed(cls, workflow: str, fallback: str) -> "WrittenReplies":
        """JADE's team as a fixed workflow: ``workflow`` for the whole question, ``fallback``
        (the run's fallback workflow) for any sub-question it decomposes into."""
        return cls(plan=workflow, subplans=fallback)

    def reply(self, role: str, task_id: str, question: str) -> str | None:
        """The reply to write for ``role`` on ``task_id`` (asking ``question``); None = sample it."""
        from ragteam.nodes.roles.jade import PLANNER, QDS, subquestions_reply, workflow_reply

        root = task_id == ROOT_TASK
        if role == PLANNER.name:
            workflow = self.plan if root else self.subplans
            return workflow_reply(workflow) if workflow else None
        if role == QDS.name and root and self.decompositions:
            from ragteam.nodes.decompositions import decompositions_by_question

            chain = decompositions_by_question(self.decompositions).get(question.strip())
            return subquestions_reply(chain) if chain else None
        return None
