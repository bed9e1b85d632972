"""Which policy plays which role. By default every role shares one model (JADE); bindings let a
method freeze some roles on another policy (MAO-ARAG's frozen executors, QAgent's frozen generator)."""

from __future__ import annotations

from dataclasses import dataclass, field

from nodes.policies.protocol import Policy


@dataclass
class Team:
    """Which policy plays which role: ``default`` for every role unless ``bindings`` names one."""

    default: Policy
    bindings: dict[str, Policy] = field(default_factory=dict)

    def policy_for(self, role: str) -> Policy:
        return self.bindings.get(role, self.default)

