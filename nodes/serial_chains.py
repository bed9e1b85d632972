"""Options of JADE's serial decomposition chains (``QDS``), read by the JADE loop and the serial
decomposer alone, grouped so the general ``Settings`` carries one field for them
(``Settings.serial``).

- ``fan_out``: a serial sub-question that names an earlier answer listing several people ("Who is
  the sister of #1?", #1 = "Bo Dee, Cy Fox") retrieves once per name, for at most this many names
  (top_k each), instead of once for the names joined: a multi-hop chain fans out, and one query
  naming five people rarely finds all five articles (0 = one retrieval, as in JADE).
- ``example_steps``: the serial decomposer is the variant shown an example chain of this many
  steps instead of its own two-step one (``nodes.roles.jade.serial_decomposer``). A small model
  writes as many sub-questions as its example has, whatever the question's hops, so this is how
  exploration samples decompositions of other lengths; the fine-tune re-pairs them with the
  role's own prompt (``trainers.algorithms.sft.own_example_prompt``) (0 = its own example).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ragteam.nodes.option_objects import option_object


@dataclass(frozen=True)
class SerialChains:
    """How JADE's serial chains run: ``fan_out`` (one retrieval per listed name, up to N; 0 = one
    retrieval) and ``example_steps`` (the serial decomposer's example chain length; 0 = its own).
    The module docstring says why each exists."""

    fan_out: int = 0
    example_steps: int = 0

    def __post_init__(self) -> None:
        from ragteam.nodes.roles.jade import SERIAL_EXAMPLES

        if isinstance(self.fan_out, bool) or not isinstance(self.fan_out, int) or self.fan_out < 0:
            raise ValueError(f"serial.fan_out must be an integer ≥ 0, got {self.fan_out!r}"[:200])
        steps = self.example_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps not in (0, *SERIAL_EXAMPLES):
            raise ValueError(f"serial.example_steps must be 0 or one of {sorted(SERIAL_EXAMPLES)}, "
                             f"got {steps!r}"[:200])

    @classmethod
    def of(cls, value: "SerialChains | Mapping | None") -> "SerialChains":
        """``value`` as serial-chain options: itself, or from a JSON object (Studio, a config
        file), whose unknown keys are one clear error."""
        return option_object(cls, value, "serial")
