"""A method as one record (``Method``): how to build its graph, the graph it trains on, its reward
schemes, which roles learn or stay frozen, and (``WorkflowChoice``) what training may do with a
planner that picks workflows. Methods are known by name through ``graphs.methods.registry``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from ragteam.graphs.contract import ragteam_graph
from ragteam.graphs.methods.rewards import RewardScheme
from ragteam.nodes.context import Settings
from ragteam.stores.owned import check_label

BUILT_IN = "ragteam"


@dataclass(frozen=True)
class WorkflowChoice:
    """A method whose planner answers a question with a workflow (JADE), and what training may
    do with that choice: ``check`` a workflow (a ``ValueError`` when the planner could not ask
    for it); the planner ``reply`` that asks for one (SFT targets); the run settings under which
    the planner's reply for the whole question is written as one (``force``: the workflow groups
    of ``forced_workflows``)."""

    check: Callable[[str], object]
    reply: Callable[[str], str]
    force: Callable[[Settings, str], Settings]


@dataclass(frozen=True)
class Method:
    """A method: a graph plus what training needs to know about it. Build the graph with
    ``graph()`` (or ``training_graph()``), which checks it against the graph contract."""

    name: str
    summary: str                                    # one line: what the method is
    build: Callable[[], object]                     # the compiled inference graph
    # reward scheme the trainer uses by default; "jade" = outcome F1 on the last call plus a
    # format penalty per call, which fits any method that names nothing more specific
    default_reward: str = "jade"
    rewards: Mapping[str, Callable[..., RewardScheme]] = field(default_factory=dict)  # defined here
    build_for_training: Callable[[], object] | None = None  # default: the inference graph
    frozen_roles: tuple[str, ...] = ()              # roles played by a frozen copy when training
    sft_roles: tuple[str, ...] = ()                 # roles SFT on good traces trains by default
    outputs: tuple[str, ...] = ()                   # extra state keys each RunResult carries
    workflow_choice: WorkflowChoice | None = None   # a planner that picks workflows (JADE)
    source: str = BUILT_IN                          # ragteam, an entry point's package, or a file

    def __post_init__(self):
        check_label(self.name, "method name")  # it names eval folders: a label, never a path

    def graph(self):
        """The inference graph, checked against (and adapted to) the graph contract."""
        return ragteam_graph(self.build(), self.name, self.outputs)

    def training_graph(self):
        """The graph the trainers roll out (the inference graph unless the method has its own)."""
        return ragteam_graph((self.build_for_training or self.build)(), self.name, self.outputs)
