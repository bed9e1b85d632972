"""Per-role LoRA adapters over one base model (``adapters:`` in the config), as training needs
them: the peft model with every adapter, the optimizer's parameter groups per adapter, their
gradient norms, and the export of each adapter as a peft folder. Which adapter plays which role,
and switching the active one, is ``nodes.policies.role_adapters.RoleMap`` (serving uses it too).

One peft model holds every adapter; exactly one is active in a forward, so each micro-batch and
each decoding batch holds calls of one adapter. A role in no adapter is played by the base
weights with every adapter off (``BASE``) and is not trained. Every adapter stays trainable
whichever is active (they all sit in the optimizer from the start, and an adapter without
gradient in a step is simply not moved by AdamW).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from ragteam.nodes.policies.role_adapters import ROLES_FILE, RoleMap


class RoleAdapters(RoleMap):
    """The role → adapter map of a run's ``adapters:`` config (name → ``AdapterSettings``), with
    what training adds: the peft model, the optimizer's groups, per-adapter gradient norms."""

    def __init__(self, settings: dict):
        super().__init__({name: s.roles for name, s in settings.items()})
        self.settings = dict(settings)

    # -- the peft model -----------------------------------------------------------------------
    def build(self, lm):
        """``lm`` wrapped by peft with every adapter, all trainable (see the module docstring)."""
        from peft import get_peft_model

        first, *rest = self.names
        lm = get_peft_model(lm, self._lora_config(first), adapter_name=first)
        for name in rest:
            lm.add_adapter(name, self._lora_config(name))
        for name in self.names:
            if self.settings[name].init is not None:
                load_adapter_weights(lm, name, Path(self.settings[name].init))
        lm.set_requires_grad(self.names, True)
        return lm

    def _lora_config(self, name: str):
        from peft import LoraConfig

        return LoraConfig(task_type="CAUSAL_LM", **self.settings[name].lora_options())

    def parameter_groups(self, module, lr: float, head_lr: float) -> list[dict]:
        """One optimizer group per adapter (its own ``lr``, else the run's), then the value
        head's: every adapter is in the optimizer from the first step."""
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        groups = [{"params": [p for n, p in named if adapter_in_name(n, self.names) == name],
                   "lr": self.settings[name].lr or lr, "adapter": name} for name in self.names]
        head = [p for n, p in named if n.startswith("value_head.")]
        left = len(named) - sum(len(g["params"]) for g in groups) - len(head)
        if left:  # the base weights stay frozen under peft; anything else would go untrained
            raise ValueError(f"{left} trainable parameters belong to no adapter nor the value head")
        return groups + [{"params": head, "lr": head_lr}]

    def grad_norms(self, module) -> dict[str, float]:
        """Each adapter's gradient norm (before clipping), from the accumulated gradients."""
        import torch

        squares = {name: torch.zeros(()) for name in self.names}
        for n, p in module.named_parameters():
            name = adapter_in_name(n, self.names)
            if name in squares and p.grad is not None:
                squares[name] = squares[name] + p.grad.detach().float().pow(2).sum().cpu()
        return {name: float(total.sqrt()) for name, total in squares.items()}


def load_adapter_weights(lm, name: str, folder: Path) -> None:
    """Adapter ``name`` of peft model ``lm`` takes the weights of the peft folder ``folder`` (in
    the adapter's own dtype); a ``ValueError`` unless they cover every one of its LoRA weights."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    state = load_file(folder / "adapter_model.safetensors")
    result = set_peft_model_state_dict(lm, state, adapter_name=name)
    missing = [k for k in result.missing_keys if adapter_in_name(k, [name]) == name]
    if missing or result.unexpected_keys:
        raise ValueError(f"{folder}: its weights do not fit adapter {name!r} of this model "
                         f"(missing {missing[:3]}, unexpected {list(result.unexpected_keys)[:3]})")


def adapter_in_name(parameter: str, names: Sequence[str]) -> str | None:
    """The adapter a peft parameter belongs to (``…lora_A.<name>.weight``), or None."""
    parts = parameter.split(".")
    for before, after in zip(parts, parts[1:]):
        if before.startswith("lora_") and after in names:
            return after
    return None


def adapter_digest(lm, name: str = "default") -> str:
    """A digest of the LoRA adapter ``name``'s weights in a PEFT model: equal digests, equal
    weights, so a sync can tell which adapters a step moved without writing any files."""
    import hashlib

    import torch

    digest = hashlib.blake2b(digest_size=16)
    for parameter, tensor in lm.named_parameters():
        if adapter_in_name(parameter, [name]) == name:
            digest.update(parameter.encode())
            digest.update(tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def export_adapters(lm, tokenizer, adapters: RoleAdapters, folder: Path, base_model: str,
                    head_state: dict) -> Path:
    """``folder/NAME/`` for each adapter (a peft folder: ``adapter_config.json`` and
    ``adapter_model.safetensors``), ``roles.json`` (which roles each plays, and the base model),
    the tokenizer and the value head; written whole or not at all, like ``export_hf``. No merged
    model: one set of merged weights cannot hold several adapters."""
    import torch

    from ragteam.trainers.config import ADAPTER_EXPORT_FILES
    from ragteam.trainers.learner.checkpoint import written_whole
    from ragteam.trainers.learner.model import adapter_files

    with written_whole(folder) as partial:
        for name in adapters.names:
            (partial / name).mkdir()
            for file, data in adapter_files(lm, name).items():
                (partial / name / file).write_bytes(data)
        (partial / ROLES_FILE).write_text(json.dumps(
            {"base_model": base_model, "adapters": adapters.roles()}, indent=2) + "\n", encoding="utf-8")
        tokenizer.save_pretrained(partial / ADAPTER_EXPORT_FILES[1])
        torch.save(head_state, partial / ADAPTER_EXPORT_FILES[2])
    return folder
