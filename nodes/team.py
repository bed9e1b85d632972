"""Which policy plays which role. By default every role shares one model (JADE); bindings let a
method freeze some roles on another policy (MAO-ARAG's frozen executors, QAgent's frozen generator)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Sequence

from ragteam.nodes.policies.protocol import Generation, GenerationRequest, Policy


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

    @classmethod
    def with_adapters(cls, policy: Policy, roles: Collection[str], frozen: Policy | None = None,
                      frozen_roles: Collection[str] = ()) -> "Team":
        """A team over a model with one adapter per role or group of roles: ``policy`` plays
        ``roles`` (each under its adapter, which the policy picks by role) and trains them;
        ``frozen`` plays ``frozen_roles``; every other role is ``policy`` untrained (the base
        weights: no adapter to train)."""
        bindings = {role: policy for role in roles}
        bindings.update({role: frozen for role in frozen_roles} if frozen is not None else {})
        return cls(Untrained(policy), bindings)

    def policy_for(self, role: str) -> Policy:
        """The policy that plays ``role``."""
        return self.bindings.get(role, self.default)


class Untrained:
    """``policy`` playing roles whose calls the learner does not train: the same engine and
    batches (so the same lock on shared weights), its calls traced ``trainable=False``."""

    trainable = False

    def __init__(self, policy: Policy):
        self.policy = policy
        self.name = policy.name

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return await self.policy.generate(requests)

    def encode_reply(self, request: GenerationRequest, text: str) -> Generation:
        return self.policy.encode_reply(request, text)
