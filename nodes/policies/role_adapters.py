"""Which LoRA adapter of one model plays which role: the map a policy decodes by
(``HFPolicy(adapters=…)``) and the learner trains by (``trainers.learner.adapters``), and the
reading and loading of a trained team's export (``--policy adapters:DIR``; on vLLM,
``nodes.policies.vllm`` serves every adapter through ``LoRARequest``s chosen by the same map).

In an HF model one adapter is active in a forward (``RoleMap.active``), so a decoding batch or a
micro-batch holds calls of one adapter (``split``); vLLM takes an adapter per request. A role in
no adapter plays on the base weights, every adapter off (``BASE``).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterator, Mapping, Sequence, TypeVar

from ragteam.nodes.policies.model_files import (check_adapter_folder, check_model_folder, checked_model_path,
                                                read_json_object)

BASE = ""  # the adapter of a role in no adapter: the base weights, every adapter off
ROLES_FILE = "roles.json"  # in an export: adapter → roles, and the base model

T = TypeVar("T")


class RoleMap:
    """adapter name → the roles it plays (a role in one adapter at most)."""

    def __init__(self, roles_of: Mapping[str, Sequence[str]]):
        check_roles_of(roles_of)
        self.names = list(roles_of)
        self.of_role = {role: name for name, roles in roles_of.items() for role in roles}
        self._roles_of = {name: list(roles) for name, roles in roles_of.items()}

    def adapter_of(self, role: str) -> str:
        """The adapter that plays ``role`` (``BASE`` for a role in none)."""
        return self.of_role.get(role, BASE)

    def roles(self) -> dict[str, list[str]]:
        """adapter name → the roles it plays (what ``roles.json`` records)."""
        return {name: list(roles) for name, roles in self._roles_of.items()}

    def split(self, items: Sequence[T]) -> dict[str, list[T]]:
        """``items`` (anything with a ``role``) by adapter, in ``names`` order, order kept within
        each; calls that share a prompt share a role, so a prompt group never spans two."""
        parts: dict[str, list[T]] = {}
        for item in items:
            parts.setdefault(self.adapter_of(item.role), []).append(item)
        return {name: parts[name] for name in [*self.names, BASE] if name in parts}

    @contextmanager
    def active(self, lm, name: str) -> Iterator[None]:
        """``name`` is the only adapter on in ``lm``'s forwards inside the block (``BASE``: none).
        Every adapter stays trainable: peft's ``set_adapter`` freezes the inactive ones, which
        would drop them from a learner's later steps."""
        if name == BASE:
            with lm.disable_adapter():
                yield
            return
        if lm.active_adapter != name:
            lm.set_adapter(name)
            lm.set_requires_grad(self.names, True)
        yield


def check_roles_of(roles_of: object) -> None:
    """A ``ValueError`` unless ``roles_of`` maps adapter names (labels: a folder of the export,
    never a path) to lists of role names, each role in one adapter only: a role list written as
    one string, or a role in two adapters, would otherwise serve a role under the wrong weights."""
    from ragteam.stores.owned import is_label

    if not isinstance(roles_of, Mapping) or not roles_of:
        raise ValueError(f"adapters: expected adapter name → list of roles, got {roles_of!r}"[:300])
    seen: dict[str, str] = {}
    for name, roles in roles_of.items():
        if not is_label(name):
            raise ValueError(f"adapter name {name!r}: a plain folder name (letters, digits, '-', '_', '.'), not a path")
        if isinstance(roles, str) or not isinstance(roles, Sequence) or not all(isinstance(r, str) and r for r in roles):
            raise ValueError(f"adapter {name!r}: its roles must be a list of role names, got {roles!r}"[:300])
        for role in roles:
            if role in seen:
                raise ValueError(f"role {role!r} is in two adapters ({seen[role]!r} and {name!r}); one adapter plays a role")
            seen[role] = name


@dataclass(frozen=True)
class TeamExport:
    """A trained team's export (``OUT/adapters``), read but not loaded: the base model's folder,
    the role map, and the folders of each adapter and of the tokenizer."""

    folder: Path
    base_model: str
    roles: RoleMap

    def adapter_dir(self, name: str) -> Path:
        return self.folder / name

    @property
    def base_dir(self) -> str:
        """The base model's folder: ``base_model`` itself, or the offline model it names
        (``offline:NAME``, converted once), so a committed export need not carry a path."""
        from ragteam.nodes.policies.offline_model import ensure_offline_model, offline_model

        path = checked_model_path(self.base_model)  # None: an offline model's spec
        return path if path is not None else str(ensure_offline_model(model=offline_model(self.base_model)))

    @property
    def tokenizer_dir(self) -> str:
        return str(self.folder / "tokenizer") if (self.folder / "tokenizer").is_dir() else self.base_dir

    def max_rank(self) -> int:
        """The highest LoRA rank of any adapter (what a vLLM engine must reserve room for)."""
        ranks = []
        for name in self.roles.names:
            config = read_json_object(self.adapter_dir(name) / "adapter_config.json")
            ranks += [int(config["r"]), *map(int, (config.get("rank_pattern") or {}).values())]
        return max(ranks)


def read_team_export(folder: str | Path, known_roles: Collection[str] | None = None) -> TeamExport:
    """The export in ``folder``, checked (its base model's folder too) without loading a model; a
    clear ``ValueError`` when the folder is not one, or (given ``known_roles``) when it names a
    role no graph has: a mistyped role would be served by the base weights, its adapter unused."""
    from ragteam.stores.user_files import read_regular_bytes

    folder = Path(folder)
    try:
        spec = json.loads(read_regular_bytes(folder / ROLES_FILE, 1 << 20, ROLES_FILE))
        base, roles_of = spec["base_model"], spec["adapters"]
        if not isinstance(base, str):
            raise TypeError(f"base_model must be a model folder or spec, got {base!r}"[:200])
        roles = RoleMap(roles_of)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as error:
        raise ValueError(f"{folder}: not an export of per-role adapters (its {ROLES_FILE}: "
                         f"{type(error).__name__}: {error})"[:500]) from None
    unknown = sorted(set(roles.of_role) - set(known_roles)) if known_roles is not None else []
    if unknown:
        raise ValueError(f"{folder / ROLES_FILE}: unknown role(s) {', '.join(unknown)}; roles: "
                         f"{', '.join(sorted(known_roles))}"[:1000])
    checked_model_path(base)  # the base model's folder, checked like any model spec's
    missing = [name for name in roles.names if not (folder / name / "adapter_config.json").is_file()]
    if not roles.names or missing:
        raise ValueError(f"{folder}: {ROLES_FILE} names adapters without a peft folder: {missing or 'none'}")
    for name in roles.names:  # the files peft and the tokenizer read, checked as a model's are
        check_adapter_folder(folder / name)
    if (folder / "tokenizer").is_dir():
        check_model_folder(folder / "tokenizer")
    return TeamExport(folder, base, roles)


def load_team_export(folder: str | Path, device: str = "cpu", known_roles: Collection[str] | None = None):
    """(lm, tokenizer, role map) of a trained team's export (``OUT/adapters``: one peft folder
    per adapter and ``roles.json`` naming the base model and each adapter's roles), for the HF
    engine: one peft model holding every adapter."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    team = read_team_export(folder, known_roles)
    tokenizer = AutoTokenizer.from_pretrained(team.tokenizer_dir)
    lm = AutoModelForCausalLM.from_pretrained(team.base_dir, dtype=torch.float32).to(device)
    first, *rest = team.roles.names
    lm = PeftModel.from_pretrained(lm, team.adapter_dir(first), adapter_name=first)
    for name in rest:
        lm.load_adapter(team.adapter_dir(name), adapter_name=name)
    return lm.eval(), tokenizer, team.roles
