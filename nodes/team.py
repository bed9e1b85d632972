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

    @classmethod
    def with_frozen(cls, trainable: Policy, frozen: Policy | None, roles) -> "Team":
        """``trainable`` plays every role except ``roles``, which ``frozen`` plays (a team
        without either is all ``trainable``). "Frozen" is a property of the team."""
        if frozen is None or not roles:
            return cls(trainable)
        return cls(trainable, {role: frozen for role in roles})

    def policy_for(self, role: str) -> Policy:
        """The policy that plays ``role``."""
        return self.bindings.get(role, self.default)

