"""Which policy plays which role. By default every role shares one model (JADE); bindings let a
method freeze some roles on another policy (MAO-ARAG's frozen executors, QAgent's frozen generator).

"Frozen" is a property of the team, not of a policy: the same model can play a trained role in one
team and a frozen one in another (the learner's base weights play the roles in no adapter), and a
policy knows only what it can do (``exact_ids``). A team marks a frozen role by binding it to
``Frozen(policy)``; a call is trained when its policy returns exact ids and is not frozen
(``Team.trains``), and the trace records that as ``Transition.trained``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Sequence

from ragteam.nodes.policies.protocol import Generation, GenerationRequest, Policy, exact_ids


@dataclass
class Team:
    """Which policy plays which role: ``default`` for every role unless ``bindings`` names one."""

    default: Policy
    bindings: dict[str, Policy] = field(default_factory=dict)

    @classmethod
    def with_frozen(cls, learner: Policy, frozen: Policy | None, roles) -> "Team":
        """``learner`` plays every role except ``roles``, which ``frozen`` plays, frozen (a team
        without either is all ``learner``'s)."""
        if frozen is None or not roles:
            return cls(learner)
        return cls(learner, {role: Frozen(frozen) for role in roles})

    @classmethod
    def with_adapters(cls, policy: Policy, roles: Collection[str], frozen: Policy | None = None,
                      frozen_roles: Collection[str] = ()) -> "Team":
        """A team over a model with one adapter per role or group of roles: ``policy`` plays
        ``roles`` (each under its adapter, which the policy picks by role) and trains them;
        ``frozen`` plays ``frozen_roles``; every other role is ``policy`` frozen (the base
        weights: no adapter to train)."""
        bindings = {role: policy for role in roles}
        bindings.update({role: Frozen(frozen) for role in frozen_roles} if frozen is not None else {})
        return cls(Frozen(policy), bindings)

    def policy_for(self, role: str) -> Policy:
        """The policy that plays ``role``."""
        return self.bindings.get(role, self.default)

    def trains(self, role: str) -> bool:
        """Whether ``role``'s calls enter training: its policy returns exact ids and log-probs
        (nothing else can be trained on) and the team has not frozen the role."""
        policy = self.policy_for(role)
        return not isinstance(policy, Frozen) and exact_ids(policy)


class Frozen:
    """``policy`` playing roles whose calls the learner does not train: the same engine and
    batches (so the same lock on shared weights), its calls traced ``trained=False``. Everything
    but the role's status is the policy's own (``exact_ids``, ``encode_reply``, …)."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.name = policy.name

    @property
    def exact_ids(self) -> bool:
        return exact_ids(self.policy)  # through the helper: the policy may predate the name

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return await self.policy.generate(requests)

    def __getattr__(self, attribute: str):
        # only reached for what the wrapper lacks; "policy" itself missing (a copy being made)
        # must not recurse
        if attribute == "policy":
            raise AttributeError(attribute)
        return getattr(self.policy, attribute)
