"""MAO-ARAG: the same plan → execute → update loop and executor set as JADE, but only the planner
learns. Executors are bound to a frozen policy (the paper uses an API model such as GPT-4o-mini;
here any ``Policy``, e.g. ``ChatModelPolicy`` around a langchain chat model or a second local
model), and training uses the planner-only reward with cost penalties (``trainers``)."""

from __future__ import annotations

from graphs.jade import build_jade_graph
from nodes.policy import Policy
from nodes.team import Team

EXECUTOR_ROLES = ("QR", "QDS", "QDP", "DS", "AG", "AS")


def build_mao_arag_graph():
    return build_jade_graph(name="mao_arag")


def mao_arag_team(planner: Policy, executors: Policy) -> Team:
    """The planner on the trainable policy, every executor role on the frozen one."""
    return Team(default=planner, bindings={role: executors for role in EXECUTOR_ROLES})
